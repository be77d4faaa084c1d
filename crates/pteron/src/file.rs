//! Program bytes from a file (memory-mapped) or from memory, kept aligned so that constant
//! tensors can be read in place.

use std::path::Path;

use pteron_core::Method;
use pteron_format::DataFile;

use crate::{Error, MethodOptions, Result, Runtime};

enum Bytes {
    Mapped(memmap2::Mmap),
    /// 64-byte aligned copy (the first `len` bytes of the blocks).
    Owned(Vec<Block>, usize),
    /// Bytes a caller owns and hands over without a copy (64-byte aligned).
    Shared(Box<dyn AsRef<[u8]> + Send + Sync>),
}

/// Alignment of program bytes: constant tensors are read in place, as the widest type's.
const ALIGN: usize = 64;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// The bytes of a `.pte` (or `.ptd`) file.
pub struct ProgramFile {
    bytes: Bytes,
}

impl ProgramFile {
    /// Memory-maps `path` (reads it into memory where the platform has no memory maps, as
    /// WASI).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        let f = std::fs::File::open(path).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        if len == 0 {
            // mmap of an empty file fails on some systems; an empty buffer gives the proper error.
            return Ok(Self::from_bytes(&[]));
        }
        // Safety: the map is read-only and private to this process. If another process truncates
        // or rewrites the file while it is mapped, reads may fault or see new bytes; every read
        // of file data is bounds-checked, so changed contents are at worst rejected as invalid.
        let map = match unsafe { memmap2::Mmap::map(&f) } {
            Ok(map) => map,
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => return Self::read(path),
            Err(e) => return Err(io(e)),
        };
        Ok(ProgramFile {
            bytes: Bytes::Mapped(map),
        })
    }

    /// Reads `path` into memory (no map).
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self::from_bytes(&data))
    }

    /// Copies `data` into an aligned buffer.
    pub fn from_bytes(data: &[u8]) -> Self {
        let mut blocks = vec![Block([0; 64]); data.len().div_ceil(64)];
        bytemuck::cast_slice_mut::<Block, u8>(&mut blocks)[..data.len()].copy_from_slice(data);
        ProgramFile {
            bytes: Bytes::Owned(blocks, data.len()),
        }
    }

    /// Takes bytes without copying them when they start on a 64-byte boundary (what `mmap`
    /// and aligned allocators give; the bytes must not change while the file lives), and
    /// copies them into aligned memory otherwise ([`Self::from_bytes`]).
    pub fn from_owner(owner: Box<dyn AsRef<[u8]> + Send + Sync>) -> Self {
        let data = (*owner).as_ref();
        if !(data.as_ptr() as usize).is_multiple_of(ALIGN) {
            return Self::from_bytes(data);
        }
        ProgramFile {
            bytes: Bytes::Shared(owner),
        }
    }

    /// Whether the bytes are the caller's, not a copy (a map or [`Self::from_owner`]'s
    /// aligned bytes).
    pub fn is_borrowed(&self) -> bool {
        !matches!(self.bytes, Bytes::Owned(..))
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped(m) => m,
            Bytes::Owned(b, len) => &bytemuck::cast_slice(b)[..*len],
            Bytes::Shared(o) => (**o).as_ref(),
        }
    }

    /// Verifies the bytes as a `.ptd` external data file.
    pub fn data_file(&self) -> Result<DataFile<'_>> {
        Ok(DataFile::parse(self.bytes())?)
    }
}

/// Constants that a method packed at load no longer need their pages of a memory-mapped
/// file: they are dropped from the process's resident memory (the mapping stays valid; a later
/// read pages them back in from the file). Whole pages inside `bytes` only; other sources
/// (copies in memory) keep their bytes.
impl pteron_core::PageRelease for ProgramFile {
    fn release(&self, bytes: &[u8]) {
        let Bytes::Mapped(map) = &self.bytes else {
            return;
        };
        let base = map.as_ptr() as usize;
        let start = bytes.as_ptr() as usize;
        let Some(end) = start.checked_add(bytes.len()) else {
            return;
        };
        if start < base || end > base + map.len() {
            return;
        }
        const PAGE: usize = 4096;
        let first = (start - base).div_ceil(PAGE) * PAGE;
        let last = (end - base) / PAGE * PAGE;
        if last <= first {
            return;
        }
        #[cfg(unix)]
        // Safety: MADV_DONTNEED on a read-only file mapping drops this process's copies of
        // the pages; the range stays mapped and reads return the file's bytes again (the same
        // bytes, unless another process rewrites the file: see `open`). No reference into the
        // mapping is invalidated. A failure only means the pages stay resident.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
        };
        #[cfg(not(unix))]
        let _ = (map, first, last);
    }
}

/// A verified program, borrowing the file's bytes, and the runtime its methods load with
/// ([`crate::Runtime::load_program`]).
#[derive(Clone)]
pub struct Program<'a> {
    inner: pteron_format::Program<'a>,
    external: Option<DataFile<'a>>,
    file: Option<&'a ProgramFile>,
    runtime: Runtime,
}

impl<'a> Program<'a> {
    pub(crate) fn new(
        inner: pteron_format::Program<'a>,
        file: Option<&'a ProgramFile>,
        runtime: Runtime,
    ) -> Self {
        Program {
            inner,
            external: None,
            file,
            runtime,
        }
    }

    /// Attaches a `.ptd` file that holds tensors the program stores externally.
    pub fn with_external_data(mut self, data: DataFile<'a>) -> Self {
        self.external = Some(data);
        self
    }

    /// The verified flatbuffer view (`pteron-format`), for tools that inspect a program.
    pub fn format(&self) -> &pteron_format::Program<'a> {
        &self.inner
    }

    /// The runtime this program's methods are loaded with.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Names of the methods (execution plans).
    pub fn method_names(&self) -> Vec<&'a str> {
        self.inner.plans().filter_map(|p| p.name()).collect()
    }

    /// Loads a method with the runtime's kernels, backends, threads and limits.
    pub fn load_method(&self, name: &str) -> Result<Method<'a>> {
        self.load_method_with(name, MethodOptions::default())
    }

    /// Loads a method with per-method overrides of the runtime's threads and limits.
    pub fn load_method_with(
        &self,
        name: &str,
        options: impl Into<MethodOptions>,
    ) -> Result<Method<'a>> {
        let src = pteron_core::DataSources {
            program: self.inner,
            external: self.external,
            release: self
                .file
                .map(|f| f as &'a (dyn pteron_core::PageRelease + 'a)),
        };
        let options: MethodOptions = options.into();
        let load = options.load_options(&self.runtime)?;
        Ok(Method::load_with_options(
            src,
            name,
            self.runtime.kernels(),
            load,
        )?)
    }
}
