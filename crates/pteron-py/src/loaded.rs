//! A program that owns the bytes it was read from, shared by the methods, generators and
//! transcribers that borrow them.

use pteron::{Program, ProgramFile, Runtime};

/// A program that owns its bytes (and its `.ptd` data file, if any). Methods and generators
/// hold an `Arc` of it, since they borrow those bytes.
pub(crate) struct LoadedProgram {
    // Declared first: fields drop in order, and the program borrows both files.
    program: Program<'static>,
    _data: Option<Box<ProgramFile>>,
    _file: Box<ProgramFile>,
}

impl LoadedProgram {
    pub(crate) fn new(
        runtime: &Runtime,
        file: ProgramFile,
        data: Option<ProgramFile>,
    ) -> pteron::Result<Self> {
        let file = Box::new(file);
        let data = data.map(Box::new);
        // Safety: the program borrows the files' bytes, which live on the heap behind the
        // boxes; they are never moved out of or dropped before `program` (field order above),
        // so the extended borrows never outlive them.
        let (bytes, ptd): (&'static ProgramFile, Option<&'static ProgramFile>) = unsafe {
            (
                &*(&*file as *const ProgramFile),
                data.as_deref().map(|d| &*(d as *const ProgramFile)),
            )
        };
        let mut program = runtime.load_program(bytes)?;
        if let Some(d) = ptd {
            program = program.with_external_data(d.data_file()?);
        }
        Ok(LoadedProgram {
            program,
            _data: data,
            _file: file,
        })
    }

    /// The program, for as long as this value (and so its bytes) lives.
    pub(crate) fn program(&self) -> &Program<'static> {
        &self.program
    }
}
