//! Execution: runs a loaded method's chains, instruction by instruction, over the tables the
//! load stages prepared. Allocates nothing.

use crate::dtype::ScalarType;
use crate::error::{Error, Result};
use crate::instr::Instr;
use crate::kernel::KernelContext;
use crate::method::Method;
use crate::parallel::{Parallel, INLINE};
use crate::value::{Storage, Value};

impl<'p> Method<'p> {
    /// Runs every chain once.
    pub fn execute(&mut self) -> Result<()> {
        self.execute_observed(&mut NoObserver)
    }

    /// Runs every chain once, telling `observer` about each kernel call (for profiling).
    pub fn execute_observed(&mut self, observer: &mut dyn ExecutionObserver) -> Result<()> {
        let budget = self.config.instruction_budget;
        let mut count: u64 = 0;
        for c in 0..self.chains.len() {
            let mut pc = 0usize;
            while pc < self.chains[c].len() {
                count += 1;
                if count > budget {
                    self.instructions_run = count;
                    return Err(Error::InstructionBudget(budget));
                }
                match self.chains[c][pc] {
                    Instr::Nop => pc += 1,
                    Instr::Kernel { op, args, state } => {
                        let run = self.ops[op as usize].kernel.run;
                        let event = KernelEvent {
                            chain: c,
                            instruction: pc,
                            op_index: op as usize,
                            op: &self.ops[op as usize].name,
                        };
                        observer.kernel_begin(&event);
                        let parallel: &dyn Parallel = match &self.parallel {
                            Some(p) => &**p,
                            None => &INLINE,
                        };
                        let mut ctx = KernelContext {
                            values: &mut self.values,
                            pool: &self.pool,
                            arenas: &mut self.arenas,
                            args: &self.args[args.range()],
                            prepared: self.states.get(state as usize).map(|s| &*s.state),
                            scratch: self.scratch.bytes_mut(),
                            parallel,
                        };
                        let result = run(&mut ctx);
                        observer.kernel_end(&event);
                        result.map_err(|source| Error::Kernel {
                            op: self.ops[op as usize].name.clone(),
                            instruction: pc,
                            source,
                        })?;
                        pc += 1;
                    }
                    Instr::Move { from, to } => {
                        self.values[to as usize] = self.values[from as usize];
                        pc += 1;
                    }
                    Instr::JumpFalse { cond, dest } => {
                        if self.condition(cond as usize, pc)? {
                            pc += 1;
                        } else {
                            pc = dest as usize;
                        }
                    }
                    Instr::Free { value } => {
                        match &mut self.values[value as usize] {
                            Value::Tensor(t) => t.storage = Storage::Empty,
                            _ => {
                                return Err(Error::NotATensor {
                                    what: "FreeCall",
                                    value,
                                })
                            }
                        }
                        pc += 1;
                    }
                    Instr::Delegate { index, args } => {
                        let event = KernelEvent {
                            chain: c,
                            instruction: pc,
                            op_index: self.ops.len() + index as usize,
                            op: &self.delegate_names[index as usize],
                        };
                        observer.kernel_begin(&event);
                        let parallel: &dyn Parallel = match &self.parallel {
                            Some(p) => &**p,
                            None => &INLINE,
                        };
                        let mut ctx = KernelContext {
                            values: &mut self.values,
                            pool: &self.pool,
                            arenas: &mut self.arenas,
                            args: &self.args[args.range()],
                            prepared: None,
                            scratch: &mut [],
                            parallel,
                        };
                        let result = self.delegates[index as usize].execute(&mut ctx);
                        observer.kernel_end(&event);
                        result.map_err(|source| Error::Kernel {
                            op: self.delegate_names[index as usize].clone(),
                            instruction: pc,
                            source,
                        })?;
                        pc += 1;
                    }
                }
            }
        }
        self.instructions_run = count;
        Ok(())
    }

    /// Jump condition: a Bool, or a bool tensor (true only if every element is true).
    fn condition(&self, vi: usize, pc: usize) -> Result<bool> {
        match &self.values[vi] {
            Value::Bool(b) => Ok(*b),
            Value::Tensor(t) if t.info.dtype() == ScalarType::Bool => {
                let r = self.tensor_ref(vi, t).map_err(|source| Error::Kernel {
                    op: "jump_false".into(),
                    instruction: pc,
                    source,
                })?;
                Ok(r.bytes.iter().all(|&b| b != 0))
            }
            v => Err(Error::Condition {
                value: vi,
                kind: v.kind(),
            }),
        }
    }
}

/// One kernel call, as an [`ExecutionObserver`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct KernelEvent<'a> {
    pub chain: usize,
    /// Instruction index within the chain.
    pub instruction: usize,
    /// Index into the method's operator table (see [`Method::operator_names`]).
    pub op_index: usize,
    pub op: &'a str,
}

/// Hooks around every kernel call of [`Method::execute_observed`]: profilers and tracers
/// implement it (the core has no clock of its own).
pub trait ExecutionObserver {
    fn kernel_begin(&mut self, event: &KernelEvent<'_>);
    fn kernel_end(&mut self, event: &KernelEvent<'_>);
}

struct NoObserver;

impl ExecutionObserver for NoObserver {
    fn kernel_begin(&mut self, _: &KernelEvent<'_>) {}
    fn kernel_end(&mut self, _: &KernelEvent<'_>) {}
}
