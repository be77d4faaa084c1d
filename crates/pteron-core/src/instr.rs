//! What a loaded method runs: its decoded instructions, the operators they call and the
//! delegates, as the load stages build them and the executor reads them.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use crate::backend::DelegateHandle;
use crate::registry::Kernel;
use crate::value::ListRef;

/// No prepared state for this instruction.
pub(crate) const NO_STATE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Instr {
    Kernel {
        op: u32,
        args: ListRef,
        state: u32,
    },
    /// A call removed by load-time planning.
    Nop,
    Move {
        from: u32,
        to: u32,
    },
    JumpFalse {
        cond: u32,
        dest: u32,
    },
    Free {
        value: u32,
    },
    /// A `DelegateCall`: delegate `index` over the argument values `args`.
    Delegate {
        index: u32,
        args: ListRef,
    },
}

/// An operator of the method's table with the kernel that runs it.
#[derive(Clone)]
pub(crate) struct Op {
    pub name: String,
    pub kernel: Kernel,
}

/// The method's instruction arguments (value indices; each instruction names a range) and
/// its chains of instructions.
#[derive(Default)]
pub(crate) struct Code {
    pub args: Vec<u32>,
    pub chains: Vec<Vec<Instr>>,
}

impl Code {
    /// Appends `items` to the argument table and returns their range.
    pub fn push_args(&mut self, items: impl IntoIterator<Item = u32>) -> ListRef {
        let start = self.args.len() as u32;
        self.args.extend(items);
        ListRef {
            start,
            len: self.args.len() as u32 - start,
        }
    }
}

/// Initialised delegates, in order (the plan's delegates, then the partitioners' regions),
/// each with its name for errors and observers (`"<backend id> delegate <i>"`).
#[derive(Default)]
pub(crate) struct Delegates<'p> {
    pub handles: Vec<Box<dyn DelegateHandle + 'p>>,
    pub names: Vec<String>,
}

impl<'p> Delegates<'p> {
    pub fn len(&self) -> usize {
        self.handles.len()
    }
    pub fn push(&mut self, name: String, handle: Box<dyn DelegateHandle + 'p>) {
        self.handles.push(handle);
        self.names.push(name);
    }
}
