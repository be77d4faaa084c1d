//! How a method is loaded: limits, threads, preparation, delegate backends, partitioners.

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::backend::BackendRegistry;
use crate::config::MethodConfig;
use crate::parallel::Parallel;
use crate::partition::Partitioner;

/// How a method is loaded: limits, threads, and whether kernels prepare call sites.
#[derive(Clone)]
pub struct LoadOptions {
    pub config: MethodConfig,
    /// Threads kernels may split work across; `None` runs everything on the calling thread.
    pub parallel: Option<Arc<dyn Parallel + Send + Sync>>,
    /// Run kernels' `prepare` steps (packed weights, fusion). Off: every call runs without
    /// prepared state, as the kernels' plain run paths. Without pteron-core's `plan` feature
    /// nothing is prepared whatever this says.
    pub prepare: bool,
    /// Backends for the program's delegates (`DelegateCall`); empty: delegated programs fail
    /// to load with [`crate::Error::BackendMissing`].
    pub backends: Arc<BackendRegistry>,
    /// Partitioners that may take runs of calls and run them as one unit (only when `prepare`
    /// is on), tried in order. Loading fails with [`crate::Error::PlanningDisabled`] when
    /// there are any and pteron-core lacks its `plan` feature.
    pub partitioners: Vec<Arc<dyn Partitioner>>,
}

impl LoadOptions {
    /// Threads the method's kernels will have (at least 1).
    pub fn num_threads(&self) -> usize {
        self.parallel.as_ref().map_or(1, |p| p.num_threads().max(1))
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            config: MethodConfig::default(),
            parallel: None,
            prepare: true,
            backends: Arc::new(BackendRegistry::new()),
            partitioners: Vec::new(),
        }
    }
}

impl From<MethodConfig> for LoadOptions {
    fn from(config: MethodConfig) -> Self {
        LoadOptions {
            config,
            ..Default::default()
        }
    }
}
