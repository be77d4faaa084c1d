//! A method's limits, shared by the loader, the executor and delegate backends.

/// Limits and options for loading and running a method.
#[derive(Clone, Copy, Debug)]
pub struct MethodConfig {
    /// Most instructions one `execute` may run (guards against loops in hostile programs).
    pub instruction_budget: u64,
    /// Most bytes of planned memory (all arenas together) a method may ask for.
    pub max_planned_bytes: u64,
    /// Most values a method may declare.
    pub max_values: usize,
}

impl Default for MethodConfig {
    fn default() -> Self {
        MethodConfig {
            instruction_budget: 10_000_000,
            max_planned_bytes: 16 << 30,
            max_values: 10_000_000,
        }
    }
}
