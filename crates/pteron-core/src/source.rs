//! Where a method's bytes come from: the program, an optional external `.ptd` file, and a
//! way to give back the resident memory of bytes the method has copied.

use pteron_format::{DataFile, Program};

/// Sources of data for a method: the program and, optionally, an external `.ptd` file.
#[derive(Clone, Copy)]
pub struct DataSources<'p> {
    pub program: Program<'p>,
    pub external: Option<DataFile<'p>>,
    /// Told about constants that load-time planning packed into a layout of its own, so that
    /// the memory holding them may be given back (e.g. the pages of a memory-mapped file).
    pub release: Option<&'p dyn PageRelease>,
}

impl<'p> DataSources<'p> {
    /// The program alone: no external data, nothing released.
    pub fn program(program: Program<'p>) -> Self {
        DataSources {
            program,
            external: None,
            release: None,
        }
    }
}

/// Gives back memory holding bytes the method no longer needs to keep resident. The bytes
/// must stay readable (a later read may fault them back in): this is a hint, not a free.
pub trait PageRelease: Sync {
    fn release(&self, bytes: &[u8]);
}
