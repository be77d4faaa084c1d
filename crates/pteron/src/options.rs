//! Per-method overrides of what the [`crate::Runtime`] loads methods with.

use std::sync::Arc;

use pteron_core::{LoadOptions, MethodConfig};

use crate::runtime::resolve_pool;
use crate::threads::ThreadPool;
use crate::{Result, Runtime};

/// Options for [`crate::Program::load_method_with`]: what one method does differently from
/// its runtime (its own threads, other limits). Kernels, backends and engines are the
/// runtime's ([`crate::RuntimeBuilder`]).
///
/// ```no_run
/// # let file = pteron::ProgramFile::open("model.pte")?;
/// # let program = pteron::Runtime::new().load_program(&file)?;
/// let method = program.load_method_with("forward", pteron::MethodOptions::new().threads(1))?;
/// # Ok::<(), pteron::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct MethodOptions {
    /// Limits on what the program may ask for (default: the runtime's).
    pub config: Option<MethodConfig>,
    /// Threads for this method's kernels: `Some(1)` runs them on the calling thread, `Some(n)`
    /// gives the method a pool of its own; `None` uses the runtime's pool.
    pub threads: Option<usize>,
    /// An existing pool for this method (overrides `threads`).
    pub pool: Option<Arc<ThreadPool>>,
}

impl From<MethodConfig> for MethodOptions {
    fn from(config: MethodConfig) -> Self {
        MethodOptions {
            config: Some(config),
            ..Default::default()
        }
    }
}

impl MethodOptions {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn config(mut self, config: MethodConfig) -> Self {
        self.config = Some(config);
        self
    }
    /// Threads for kernels (1: none started). 0 means the runtime's.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = (n != 0).then_some(n);
        self
    }
    pub fn pool(mut self, pool: Arc<ThreadPool>) -> Self {
        self.pool = Some(pool);
        self
    }

    pub(crate) fn load_options(&self, runtime: &Runtime) -> Result<LoadOptions> {
        let pool = match (&self.pool, self.threads) {
            (None, None) => None,
            (pool, threads) => Some(resolve_pool(pool.clone(), threads)?),
        };
        Ok(runtime.load_options(self.config, pool))
    }
}
