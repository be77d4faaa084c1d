//! The runtime: everything programs are loaded with, in one value.
//!
//! A [`Runtime`] holds the kernel library, the delegate backends, the engines that take over
//! parts of portable programs (partitioners), the thread pool and the limits a program may ask
//! for. Programs are loaded from it ([`Runtime::load_program`]) and methods from those
//! programs, so that a method's kernels, backends and threads are fixed in one place and
//! shared by every method loaded the same way. It is cheap to clone (the parts are shared).

use std::sync::{Arc, OnceLock};

use pteron_core::{
    BackendRegistry, KernelRegistry, LoadOptions, MethodConfig, Parallel, Partitioner,
};
use pteron_format::Limits;
use pteron_nhwc::{EngineOptions, NhwcPartitioner};

use crate::file::{Program, ProgramFile};
use crate::threads::{default_pool, ThreadPool};
use crate::{Error, Result};

/// Kernels, backends, engines, threads and limits, from which programs and methods are loaded.
///
/// ```no_run
/// use pteron::RunMethod;
///
/// let runtime = pteron::Runtime::builder().threads(2).build()?;
/// let file = pteron::ProgramFile::open("model.pte")?;
/// let program = runtime.load_program(&file)?;
/// let mut method = program.load_method("forward")?;
/// let outputs = method.run(&[pteron::Tensor::from_f32(&[1, 4], &[1.0, 2.0, 3.0, 4.0])])?;
/// # Ok::<(), pteron::Error>(())
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

/// Where a runtime's kernels run.
enum Pool {
    /// The process-wide pool of [`crate::default_threads`] threads, started by the first
    /// method that uses it (a runtime whose methods all pick their own threads starts none).
    Default,
    /// The calling thread only (`None`), or a pool of the runtime's own.
    Fixed(Option<Arc<ThreadPool>>),
}

impl Pool {
    fn get(&self) -> Option<Arc<ThreadPool>> {
        match self {
            Pool::Default => default_pool(),
            Pool::Fixed(p) => p.clone(),
        }
    }
}

struct Inner {
    kernels: KernelRegistry,
    backends: Arc<BackendRegistry>,
    partitioners: Vec<Arc<dyn Partitioner>>,
    pool: Pool,
    config: MethodConfig,
    prepare: bool,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("threads", &self.threads())
            .field("kernels", &self.inner.kernels.len())
            .field("backends", &self.inner.backends.ids().collect::<Vec<_>>())
            .field("partitioners", &self.inner.partitioners.len())
            .field("config", &self.inner.config)
            .field("prepare", &self.inner.prepare)
            .finish()
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::new()
    }
}

impl Runtime {
    /// The default runtime: every kernel pteron ships (portable, with the fast CPU kernels
    /// over them), the XNNPACK backend, channels-last regions for portable convolution
    /// networks, fused blocks (`pteron_kernels_cpu::blocks`), a thread per physical core,
    /// default limits. Built once per process and shared.
    pub fn new() -> Runtime {
        static DEFAULT: OnceLock<Runtime> = OnceLock::new();
        DEFAULT
            .get_or_init(|| Runtime::from_builder(RuntimeBuilder::default(), Pool::Default))
            .clone()
    }

    /// A runtime configured step by step.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// Verifies a program in `file` (default [`Limits`]) for loading methods with this runtime.
    pub fn load_program<'a>(&self, file: &'a ProgramFile) -> Result<Program<'a>> {
        self.load_program_with_limits(file, Limits::default())
    }

    /// As [`Runtime::load_program`], with explicit limits on the file's structure.
    pub fn load_program_with_limits<'a>(
        &self,
        file: &'a ProgramFile,
        limits: Limits,
    ) -> Result<Program<'a>> {
        let inner = pteron_format::Program::parse_with_limits(file.bytes(), limits)?;
        Ok(Program::new(inner, Some(file), self.clone()))
    }

    /// The kernel library methods are loaded with.
    pub fn kernels(&self) -> &KernelRegistry {
        &self.inner.kernels
    }

    /// The delegate backends, by id.
    pub fn backends(&self) -> &BackendRegistry {
        &self.inner.backends
    }

    /// Threads kernels run on (1: the calling thread only).
    pub fn threads(&self) -> usize {
        self.inner.pool.get().map_or(1, |p| p.threads())
    }

    /// The limits and options core loads a method with; `threads`/`pool` override the
    /// runtime's pool for one method.
    pub(crate) fn load_options(
        &self,
        config: Option<MethodConfig>,
        pool: Option<Option<Arc<ThreadPool>>>,
    ) -> LoadOptions {
        let pool = pool.unwrap_or_else(|| self.inner.pool.get());
        LoadOptions {
            config: config.unwrap_or(self.inner.config),
            parallel: pool.map(|p| p as Arc<dyn Parallel + Send + Sync>),
            prepare: self.inner.prepare,
            backends: Arc::clone(&self.inner.backends),
            partitioners: if self.inner.prepare {
                self.inner.partitioners.clone()
            } else {
                Vec::new()
            },
        }
    }

    fn from_builder(b: RuntimeBuilder, pool: Pool) -> Runtime {
        let portable = b.kernels_portable;
        let kernels = b.kernels.unwrap_or_else(|| {
            if portable {
                pteron_kernels::registry()
            } else {
                pteron_kernels_cpu::registry()
            }
        });
        let backends = b
            .backends
            .unwrap_or_else(|| Arc::new(backends_with(&b.engine)));
        let mut partitioners = Vec::new();
        if b.channels_last.unwrap_or(!portable) {
            let nhwc = NhwcPartitioner::new(b.engine.clone());
            partitioners.push(Arc::new(nhwc) as Arc<dyn Partitioner>);
        }
        if b.blocks.unwrap_or(!portable) {
            let blocks = pteron_kernels_cpu::blocks::BlockPartitioner;
            partitioners.push(Arc::new(blocks) as Arc<dyn Partitioner>);
        }
        partitioners.extend(b.partitioners);
        Runtime {
            inner: Arc::new(Inner {
                kernels,
                backends,
                partitioners,
                pool,
                config: b.config,
                prepare: b.prepare.unwrap_or(true),
            }),
        }
    }
}

/// Builds a [`Runtime`]: start from the defaults and change what differs.
#[derive(Default)]
pub struct RuntimeBuilder {
    kernels: Option<KernelRegistry>,
    kernels_portable: bool,
    backends: Option<Arc<BackendRegistry>>,
    channels_last: Option<bool>,
    blocks: Option<bool>,
    partitioners: Vec<Arc<dyn Partitioner>>,
    threads: Option<usize>,
    pool: Option<Arc<ThreadPool>>,
    config: MethodConfig,
    prepare: Option<bool>,
    engine: EngineOptions,
}

impl RuntimeBuilder {
    /// Only the portable reference kernels: simple loops, no packing, no fusion, and no
    /// channels-last regions unless [`Self::channels_last`] turns them back on. The oracle the
    /// fast kernels are checked against.
    pub fn portable(mut self) -> Self {
        self.kernels_portable = true;
        self
    }

    /// A kernel library of the caller's (e.g. the default one with kernels of its own
    /// registered over it: [`crate::default_kernels`]).
    pub fn kernels(mut self, kernels: KernelRegistry) -> Self {
        self.kernels = Some(kernels);
        self
    }

    /// The backends delegated parts of programs run on (default: [`default_backends`]); an
    /// empty registry refuses delegated programs with `BackendMissing`.
    pub fn backends(mut self, backends: impl Into<Arc<BackendRegistry>>) -> Self {
        self.backends = Some(backends.into());
        self
    }

    /// Whether runs of convolution calls in portable programs run channels-last on the
    /// NHWC engine (on by default, except with [`Self::portable`]). Needs preparation.
    pub fn channels_last(mut self, on: bool) -> Self {
        self.channels_last = Some(on);
        self
    }

    /// Whether runs of portable calls that compute a block the fast kernels know (the
    /// interleaved rotary embedding, RMSNorm and the SiLU gate of Llama exports) run as one
    /// kernel each, with the same bits
    /// (`pteron_kernels_cpu::blocks`; on by default, except with [`Self::portable`]). Needs
    /// preparation.
    pub fn blocks(mut self, on: bool) -> Self {
        self.blocks = Some(on);
        self
    }

    /// Adds an engine that takes over parts of portable programs (after the NHWC one).
    pub fn partitioner(mut self, p: Arc<dyn Partitioner>) -> Self {
        self.partitioners.push(p);
        self
    }

    /// Threads for kernels: 1 runs everything on the calling thread and starts none; 0 (or
    /// not set) is [`crate::default_threads`], sharing one process-wide pool.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = (n != 0).then_some(n);
        self
    }

    /// An existing pool, shared with other runtimes (overrides [`Self::threads`]).
    pub fn pool(mut self, pool: Arc<ThreadPool>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Limits on what a program may ask for (planned memory, instructions, …).
    pub fn config(mut self, config: MethodConfig) -> Self {
        self.config = config;
        self
    }

    /// Kernels' load-time preparation (weight packing, fusion) and the engines' regions. On
    /// by default.
    pub fn prepare(mut self, on: bool) -> Self {
        self.prepare = Some(on);
        self
    }

    /// How the channels-last engine runs XNNPACK delegates and channels-last regions (fusion
    /// policy, per-node profile). Applies to the default backends, not to [`Self::backends`].
    pub fn engine(mut self, engine: EngineOptions) -> Self {
        self.engine = engine;
        self
    }

    /// The runtime; fails only when a thread pool of the asked size cannot be started.
    pub fn build(mut self) -> Result<Runtime> {
        let pool = match (self.pool.take(), self.threads) {
            (None, None) => Pool::Default,
            (pool, threads) => Pool::Fixed(resolve_pool(pool, threads)?),
        };
        Ok(Runtime::from_builder(self, pool))
    }
}

/// The pool for a `threads` setting: none for 1, the shared default one for `None`.
pub(crate) fn resolve_pool(
    pool: Option<Arc<ThreadPool>>,
    threads: Option<usize>,
) -> Result<Option<Arc<ThreadPool>>> {
    Ok(match (pool, threads) {
        (Some(p), _) => Some(p),
        (None, None) => default_pool(),
        (None, Some(1)) => None,
        (None, Some(n)) => {
            Some(Arc::new(ThreadPool::new(n).map_err(|e| {
                Error::Invalid(format!("cannot start {n} threads: {e}"))
            })?))
        }
    })
}

/// Every delegate backend pteron ships, by id: `XnnpackBackend` (`pteron-xnnpack`, running
/// XNNPACK-lowered programs on pteron's channels-last engine, `pteron-nhwc`).
pub fn default_backends() -> BackendRegistry {
    backends_with(&EngineOptions::default())
}

/// [`default_backends`] with the engine run under `engine`.
fn backends_with(engine: &EngineOptions) -> BackendRegistry {
    let mut r = BackendRegistry::new();
    r.register(Arc::new(pteron_xnnpack::XnnpackBackend {
        engine: engine.clone(),
        ..Default::default()
    }));
    r
}
