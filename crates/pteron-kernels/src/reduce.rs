use pteron_core::KernelRegistry;

pub fn register(_r: &mut KernelRegistry) {}
