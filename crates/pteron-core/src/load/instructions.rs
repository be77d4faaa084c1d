//! Operator and instruction decoding: operators resolved in the registry (every missing one
//! reported in one error), then each chain's instructions, every index range-checked. A
//! KernelCall's kernel `check` runs over the load-time argument values, so an unsupported
//! call fails here; jump destinations must lie within the chain; FreeCall must name a tensor;
//! a DelegateCall's handle checks its argument span.

use alloc::string::String;
use alloc::vec::Vec;

use pteron_format::schema;

use crate::error::{index, Error, Result};
use crate::instr::{Code, Delegates, Instr, Op, NO_STATE};
use crate::kernel::ArgView;
use crate::registry::KernelRegistry;
use crate::value::{ListPool, ListRef, Value};

fn invalid(msg: impl Into<String>) -> Error {
    Error::invalid(msg)
}

pub use pteron_format::operator_name;

/// The plan's operators with their kernels; every operator without one is named in a single
/// [`Error::OperatorMissing`].
// A load stage, called once: not inlined, which keeps firmware smaller (size_test).
#[inline(never)]
pub(crate) fn resolve_operators(
    plan: &schema::ExecutionPlan<'_>,
    registry: &KernelRegistry,
) -> Result<Vec<Op>> {
    let mut ops = Vec::new();
    let mut missing = Vec::new();
    for op in plan.operators().into_iter().flatten() {
        let name = operator_name(&op);
        match registry.get(&name) {
            Some(&kernel) => ops.push(Op { name, kernel }),
            None => missing.push(name),
        }
    }
    if !missing.is_empty() {
        return Err(Error::OperatorMissing { ops: missing });
    }
    Ok(ops)
}

/// What instruction decoding checks instructions against.
pub(crate) struct Tables<'a, 'p> {
    pub values: &'a [Value<'p>],
    pub pool: &'a ListPool,
    pub ops: &'a [Op],
    pub delegates: &'a Delegates<'p>,
}

/// Decodes every chain of the plan.
// A load stage, called once: not inlined, which keeps firmware smaller (size_test).
#[inline(never)]
pub(crate) fn decode_chains(plan: &schema::ExecutionPlan<'_>, t: &Tables<'_, '_>) -> Result<Code> {
    let mut code = Code::default();
    for chain in plan.chains().into_iter().flatten() {
        let instrs = chain
            .instructions()
            .ok_or_else(|| invalid("chain without instructions"))?;
        let len = instrs.len();
        let mut out = Vec::with_capacity(len);
        for (pc, ins) in instrs.iter().enumerate() {
            out.push(decode_instruction(&ins, pc, len, t, &mut code.args)?);
        }
        code.chains.push(out);
    }
    if code.args.len() > u32::MAX as usize / 2 {
        return Err(invalid("too many instruction arguments"));
    }
    Ok(code)
}

/// Instruction `pc` of a chain of `len`; its arguments are appended to `args`.
fn decode_instruction(
    ins: &schema::Instruction<'_>,
    pc: usize,
    len: usize,
    t: &Tables<'_, '_>,
    args: &mut Vec<u32>,
) -> Result<Instr> {
    let n = t.values.len();
    Ok(match ins.instr_args_type() {
        schema::InstructionArguments::KernelCall => {
            let kc = ins
                .instr_args_as_kernel_call()
                .ok_or_else(|| invalid("bad KernelCall"))?;
            let op = index("operator", kc.op_index() as i64, t.ops.len())?;
            let a = kc
                .args()
                .ok_or_else(|| invalid("KernelCall without args"))?;
            let r = push_indices(args, "kernel argument", a.iter().map(|x| x as i64), n)?;
            let op_ = &t.ops[op as usize];
            if let Some(check) = op_.kernel.check {
                check(&t.view(&args[r.range()])).map_err(|source| Error::KernelRejected {
                    op: op_.name.clone(),
                    instruction: pc,
                    source,
                })?;
            }
            Instr::Kernel {
                op,
                args: r,
                state: NO_STATE,
            }
        }
        schema::InstructionArguments::DelegateCall => {
            let d = ins
                .instr_args_as_delegate_call()
                .ok_or_else(|| invalid("bad DelegateCall"))?;
            let di = index(
                "DelegateCall delegate",
                d.delegate_index() as i64,
                t.delegates.len(),
            )?;
            let a = d
                .args()
                .ok_or_else(|| invalid("DelegateCall without args"))?;
            let r = push_indices(args, "DelegateCall argument", a.iter().map(|x| x as i64), n)?;
            t.delegates.handles[di as usize]
                .check(&t.view(&args[r.range()]))
                .map_err(|source| Error::Delegate {
                    delegate: t.delegates.names[di as usize].clone(),
                    source,
                })?;
            Instr::Delegate { index: di, args: r }
        }
        schema::InstructionArguments::MoveCall => {
            let m = ins
                .instr_args_as_move_call()
                .ok_or_else(|| invalid("bad MoveCall"))?;
            Instr::Move {
                from: index("move source", m.move_from() as i64, n)?,
                to: index("move target", m.move_to() as i64, n)?,
            }
        }
        schema::InstructionArguments::JumpFalseCall => {
            let j = ins
                .instr_args_as_jump_false_call()
                .ok_or_else(|| invalid("bad JumpFalseCall"))?;
            let cond = index("jump condition", j.cond_value_index() as i64, n)?;
            let dest = j.destination_instruction();
            if dest < 0 || dest as usize > len {
                return Err(Error::JumpOutOfRange {
                    destination: dest as i64,
                    len,
                });
            }
            Instr::JumpFalse {
                cond,
                dest: dest as u32,
            }
        }
        schema::InstructionArguments::FreeCall => {
            let f = ins
                .instr_args_as_free_call()
                .ok_or_else(|| invalid("bad FreeCall"))?;
            let v = index("free", f.value_index() as i64, n)?;
            if !matches!(t.values[v as usize], Value::Tensor(_)) {
                return Err(Error::NotATensor {
                    what: "FreeCall",
                    value: v,
                });
            }
            Instr::Free { value: v }
        }
        other => return Err(Error::bad("unknown instruction type", other.0)),
    })
}

impl<'a, 'p> Tables<'a, 'p> {
    fn view<'s>(&'s self, args: &'s [u32]) -> ArgView<'s, 'p> {
        ArgView {
            values: self.values,
            pool: self.pool,
            args,
        }
    }
}

/// Appends value indices (each checked against `n` values) to `args`; returns their range.
fn push_indices(
    args: &mut Vec<u32>,
    what: &'static str,
    items: impl ExactSizeIterator<Item = i64>,
    n: usize,
) -> Result<ListRef> {
    let start = args.len() as u32;
    let len = items.len() as u32;
    for x in items {
        args.push(index(what, x, n)?);
    }
    Ok(ListRef { start, len })
}

/// The plan's inputs and outputs, as value indices.
// A load stage, called once: not inlined, which keeps firmware smaller (size_test).
#[inline(never)]
pub(crate) fn decode_io(
    plan: &schema::ExecutionPlan<'_>,
    n: usize,
) -> Result<(Vec<u32>, Vec<u32>)> {
    let inputs = plan
        .inputs()
        .ok_or_else(|| invalid("plan has no inputs"))?
        .iter()
        .map(|i| index("plan input", i as i64, n))
        .collect::<Result<Vec<_>>>()?;
    let outputs = plan
        .outputs()
        .ok_or_else(|| invalid("plan has no outputs"))?
        .iter()
        .map(|i| index("plan output", i as i64, n))
        .collect::<Result<Vec<_>>>()?;
    Ok((inputs, outputs))
}
