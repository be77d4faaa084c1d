//! How a method is loaded: limits, threads and load-time preparation.

use std::sync::Arc;

use pteron_core::{BackendRegistry, LoadOptions, MethodConfig, Parallel, Partitioner};
use pteron_nhwc::{EngineOptions, FusePolicy, NhwcPartitioner};

use crate::threads::{default_pool, ThreadPool};
use crate::{Error, Result};

/// Options for [`crate::Program::load_method_with`].
///
/// ```no_run
/// # let file = pteron::ProgramFile::open("model.pte")?;
/// # let program = file.program()?;
/// let options = pteron::MethodOptions::new().threads(2);
/// let method = program.load_method_with("forward", &pteron::default_kernels(), options)?;
/// # Ok::<(), pteron::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MethodOptions {
    /// Limits on what a program may ask for.
    pub config: MethodConfig,
    /// Threads for kernels: `None` is [`crate::default_threads`] (the physical cores; methods
    /// loaded this way share one pool), `Some(1)` runs everything on the calling thread and
    /// starts no thread, `Some(n)` gives the method its own pool of `n` threads.
    pub threads: Option<usize>,
    /// An existing pool to use (overrides `threads`), to share threads between methods.
    pub pool: Option<Arc<ThreadPool>>,
    /// Run kernels' load-time preparation (weight packing, fusion). On by default.
    pub prepare: bool,
    /// Backends for delegated programs: `None` is [`crate::default_backends`] (XNNPACK);
    /// an empty registry refuses delegated programs with `BackendMissing`.
    pub backends: Option<Arc<BackendRegistry>>,
    /// Run the convolution regions of portable programs channels-last on the channels-last
    /// engine (`pteron_nhwc::NhwcPartitioner`). On by default; only with `prepare`.
    pub channels_last: bool,
    /// How the channels-last engine runs XNNPACK delegates and channels-last regions: which
    /// chains it fuses, and whether it times every node (see [`crate::NodeProfile`]). With
    /// `backends` set, only the regions follow it (the given backends keep their own).
    pub engine: EngineOptions,
}

impl Default for MethodOptions {
    fn default() -> Self {
        MethodOptions {
            config: MethodConfig::default(),
            threads: None,
            pool: None,
            prepare: true,
            backends: None,
            channels_last: true,
            engine: EngineOptions::default(),
        }
    }
}

impl From<MethodConfig> for MethodOptions {
    fn from(config: MethodConfig) -> Self {
        MethodOptions {
            config,
            ..Default::default()
        }
    }
}

impl MethodOptions {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn config(mut self, config: MethodConfig) -> Self {
        self.config = config;
        self
    }
    /// Threads for kernels (1: none started). 0 means the default.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = (n != 0).then_some(n);
        self
    }
    pub fn pool(mut self, pool: Arc<ThreadPool>) -> Self {
        self.pool = Some(pool);
        self
    }
    pub fn prepare(mut self, on: bool) -> Self {
        self.prepare = on;
        self
    }
    /// Whether convolution regions of portable programs run channels-last.
    pub fn channels_last(mut self, on: bool) -> Self {
        self.channels_last = on;
        self
    }
    /// Options of the channels-last engine (fusion policy, per-node profile).
    pub fn engine(mut self, engine: EngineOptions) -> Self {
        self.engine = engine;
        self
    }
    /// The backends delegated parts of programs run on.
    pub fn backends(mut self, backends: impl Into<Arc<BackendRegistry>>) -> Self {
        self.backends = Some(backends.into());
        self
    }

    fn engine_is_default(&self) -> bool {
        self.engine.fuse == FusePolicy::Default && self.engine.profile.is_none()
    }

    pub(crate) fn load_options(&self) -> Result<LoadOptions> {
        let pool: Option<Arc<ThreadPool>> = match (&self.pool, self.threads) {
            (Some(p), _) => Some(Arc::clone(p)),
            (None, None) => default_pool(),
            (None, Some(1)) => None,
            (None, Some(n)) => {
                Some(Arc::new(ThreadPool::new(n).map_err(|e| {
                    Error::Invalid(format!("cannot start {n} threads: {e}"))
                })?))
            }
        };
        Ok(LoadOptions {
            config: self.config,
            parallel: pool.map(|p| p as Arc<dyn Parallel + Send + Sync>),
            prepare: self.prepare,
            backends: match &self.backends {
                Some(b) => Arc::clone(b),
                None if self.engine_is_default() => crate::shared_default_backends(),
                None => Arc::new(crate::backends_with(&self.engine)),
            },
            partitioners: if self.channels_last {
                vec![Arc::new(NhwcPartitioner::new(self.engine.clone())) as Arc<dyn Partitioner>]
            } else {
                Vec::new()
            },
        })
    }
}
