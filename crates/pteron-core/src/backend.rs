//! Delegates: backends that run the parts of a program lowered to them (`DelegateCall`).
//!
//! A program lists its delegates in `ExecutionPlan.delegates`: a backend id (`"XnnpackBackend"`),
//! the backend's *processed* payload (inline in the flatbuffer or in a segment) and compile
//! specs. When a method is loaded, each delegate's backend is looked up by id in the
//! [`BackendRegistry`] given with the kernels (none registered: [`crate::Error::BackendMissing`])
//! and its [`Backend::init`] turns the payload into a [`DelegateHandle`]: parsing, validation and
//! weight packing all happen there, once. Every `DelegateCall` instruction then names a handle
//! and a span of argument values (the lowered module's inputs, then its outputs); at load the
//! handle checks that span ([`DelegateHandle::check`]), and each run calls
//! [`DelegateHandle::execute`] with a [`KernelContext`] over it, exactly as a kernel is called:
//! it reads its inputs, resizes and writes its outputs, and may use the method's threads.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::sync::Arc;

use pteron_format::{DataFile, FormatError, Program};

use crate::config::MethodConfig;
use crate::error::KernelError;
use crate::kernel::{ArgView, KernelContext};

/// One compile spec of a delegate: a key and the backend-defined bytes stored with it.
#[derive(Clone, Copy, Debug)]
pub struct CompileSpec<'p> {
    pub key: &'p str,
    pub value: &'p [u8],
}

/// Named blobs a backend may look up by key (delegate weights stored outside the payload).
pub trait NamedDataMap<'p> {
    /// The bytes stored under `key`; `Ok(None)` when no source has the key.
    fn get(&self, key: &str) -> Result<Option<&'p [u8]>, FormatError>;
}

/// The program's `named_data`, then the external `.ptd` file's, in that order.
#[derive(Clone, Copy)]
pub struct ProgramNamedData<'p> {
    pub program: Program<'p>,
    pub external: Option<DataFile<'p>>,
}

impl<'p> NamedDataMap<'p> for ProgramNamedData<'p> {
    fn get(&self, key: &str) -> Result<Option<&'p [u8]>, FormatError> {
        match self.program.named_data(key) {
            Ok(b) => return Ok(Some(b)),
            Err(FormatError::KeyNotFound(_)) => {}
            Err(e) => return Err(e),
        }
        match self.external.map(|f| f.get(key)) {
            Some(Ok(b)) => Ok(Some(b)),
            None | Some(Err(FormatError::KeyNotFound(_))) => Ok(None),
            Some(Err(e)) => Err(e),
        }
    }
}

/// No named data at all (for backends used outside a program).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoNamedData;

impl<'p> NamedDataMap<'p> for NoNamedData {
    fn get(&self, _: &str) -> Result<Option<&'p [u8]>, FormatError> {
        Ok(None)
    }
}

/// What a backend gets to initialise one delegate of a method.
pub struct BackendInit<'a, 'p> {
    /// The method being loaded.
    pub method_name: &'a str,
    /// Index of the delegate in the plan's delegate list.
    pub delegate_index: usize,
    /// The delegate's processed payload (borrowed from the program's bytes).
    pub processed: &'p [u8],
    pub compile_specs: &'a [CompileSpec<'p>],
    /// Named data of the program and its external data file.
    pub named_data: &'a dyn NamedDataMap<'p>,
    /// Threads the method's kernels (and so the delegate) may use at run time.
    pub num_threads: usize,
    /// The method's limits; a backend keeps the memory it allocates within
    /// `max_planned_bytes`.
    pub config: MethodConfig,
}

/// A delegate backend, registered under its id.
pub trait Backend: Send + Sync {
    /// The id programs name it by (`BackendDelegate.id`), e.g. `"XnnpackBackend"`.
    fn id(&self) -> &str;
    /// Parses and prepares one delegate's payload. Errors name what is unsupported or invalid.
    fn init<'p>(
        &self,
        init: &BackendInit<'_, 'p>,
    ) -> Result<Box<dyn DelegateHandle + 'p>, KernelError>;
}

/// One initialised delegate, owned by the method that loaded it.
pub trait DelegateHandle: Send + Sync {
    /// Load-time check of the argument span of one `DelegateCall` naming this delegate (count,
    /// kinds, dtypes, shapes against what the payload expects).
    fn check(&self, args: &ArgView<'_, '_>) -> Result<(), KernelError> {
        let _ = args;
        Ok(())
    }
    /// Runs the delegate over the `DelegateCall`'s arguments (`ctx`'s arguments): reads the
    /// input tensors, resizes and writes the output tensors. Should not allocate once it has
    /// run with the largest shapes it will see.
    fn execute(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError>;
    /// Whether `execute` writes argument `arg` of its span (`None`: not known). Values a
    /// delegate writes are not taken for views the exporter planned without an instruction,
    /// which lets partitioners take calls that reuse their memory.
    fn writes_arg(&self, arg: usize) -> Option<bool> {
        let _ = arg;
        None
    }
    /// Bytes this handle holds (packed weights, buffers), for statistics.
    fn memory_bytes(&self) -> usize {
        0
    }
}

/// Backend id → backend. Later registrations replace earlier ones.
#[derive(Clone, Default)]
pub struct BackendRegistry {
    backends: BTreeMap<String, Arc<dyn Backend>>,
}

impl core::fmt::Debug for BackendRegistry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.backends.keys()).finish()
    }
}

impl BackendRegistry {
    /// An empty registry: delegated programs fail to load with `BackendMissing`.
    pub fn new() -> Self {
        Self::default()
    }
    /// Registers `backend` under its id.
    pub fn register(&mut self, backend: Arc<dyn Backend>) {
        self.backends.insert(backend.id().to_string(), backend);
    }
    pub fn get(&self, id: &str) -> Option<&Arc<dyn Backend>> {
        self.backends.get(id)
    }
    /// The registered ids, sorted.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.backends.keys().map(|s| s.as_str())
    }
    pub fn len(&self) -> usize {
        self.backends.len()
    }
    pub fn is_empty(&self) -> bool {
        self.backends.is_empty()
    }
}
