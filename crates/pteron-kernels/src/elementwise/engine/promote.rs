//! PyTorch type promotion over the dtypes pteron computes with: compute kinds,
//! `promote_types`, the operands it ranks ([`Opnd`]: a tensor or a scalar), `result_type` and
//! `canCast`.

use pteron_core::{ArgAccess, KernelError, Scalar, ScalarType, TensorInfo, Value};

/// Which compute type a dtype computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompKind {
    Bool,
    Int,
    F32,
    F64,
}

pub fn comp_kind(dtype: ScalarType) -> Result<CompKind, KernelError> {
    use ScalarType::*;
    Ok(match dtype {
        Bool => CompKind::Bool,
        Byte | Char | Short | Int | Long => CompKind::Int,
        Half | BFloat16 | Float => CompKind::F32,
        Double => CompKind::F64,
        other => return Err(KernelError::dtype(other, "elementwise compute")),
    })
}

/// Whether `dtype` is one of the dtypes pteron computes with.
pub fn is_supported(dtype: ScalarType) -> bool {
    ScalarType::REAL_AND_BOOL.contains(&dtype)
}

/// Errors unless `dtype` is one of the dtypes pteron computes with.
pub fn require_supported(op: &'static str, dtype: ScalarType) -> Result<(), KernelError> {
    if is_supported(dtype) {
        Ok(())
    } else {
        Err(KernelError::dtype(dtype, op))
    }
}

fn int_rank(t: ScalarType) -> Option<u8> {
    use ScalarType::*;
    Some(match t {
        Bool => 0,
        Byte => 1,
        Char => 1,
        Short => 2,
        Int => 3,
        Long => 4,
        _ => return None,
    })
}

/// `torch.promote_types` over the dtypes pteron computes with.
pub fn promote_types(a: ScalarType, b: ScalarType) -> Result<ScalarType, KernelError> {
    use ScalarType::*;
    if a == b {
        return Ok(a);
    }
    for t in [a, b] {
        require_supported("type promotion", t)?;
    }
    if a.is_floating() || b.is_floating() {
        return Ok(match (a.is_floating(), b.is_floating()) {
            (true, false) => a,
            (false, true) => b,
            _ => {
                if a == Double || b == Double {
                    Double
                } else {
                    // f16+bf16, f16+f32, bf16+f32
                    Float
                }
            }
        });
    }
    // Both bool or integer.
    if a == Bool {
        return Ok(b);
    }
    if b == Bool {
        return Ok(a);
    }
    if (a == Byte && b == Char) || (a == Char && b == Byte) {
        return Ok(Short);
    }
    let (ra, rb) = (int_rank(a).unwrap_or(4), int_rank(b).unwrap_or(4));
    Ok(if ra >= rb { a } else { b })
}

fn combine_categories(
    higher: Option<ScalarType>,
    lower: Option<ScalarType>,
) -> Result<Option<ScalarType>, KernelError> {
    let Some(h) = higher else { return Ok(lower) };
    let Some(l) = lower else { return Ok(Some(h)) };
    if h.is_floating() {
        return Ok(Some(h));
    }
    if h == ScalarType::Bool || l.is_floating() {
        return promote_types(h, l).map(Some);
    }
    Ok(Some(h))
}

/// The dtype a Python scalar takes in type promotion (float → the default float32).
pub fn scalar_dtype(s: Scalar) -> ScalarType {
    match s {
        Scalar::Bool(_) => ScalarType::Bool,
        Scalar::Int(_) => ScalarType::Long,
        Scalar::Double(_) => ScalarType::Float,
    }
}

/// An operand of an elementwise op: a tensor argument or a scalar.
#[derive(Clone, Copy, Debug)]
pub enum Opnd {
    Tensor(TensorInfo),
    Scalar(Scalar),
}

impl Opnd {
    /// Reads argument `i` as a tensor or a scalar.
    pub fn read<'p>(v: &impl ArgAccess<'p>, i: usize) -> Result<Opnd, KernelError> {
        match v.value(i)? {
            Value::Tensor(t) => Ok(Opnd::Tensor(t.info)),
            _ => Ok(Opnd::Scalar(v.scalar(i)?)),
        }
    }
    pub fn dtype(&self) -> ScalarType {
        match self {
            Opnd::Tensor(t) => t.dtype(),
            Opnd::Scalar(s) => scalar_dtype(*s),
        }
    }
    pub fn sizes(&self) -> &[usize] {
        match self {
            Opnd::Tensor(t) => t.sizes(),
            Opnd::Scalar(_) => &[],
        }
    }
}

/// `torch.result_type` over tensors (0-d tensors rank below tensors with dims) and Python scalars.
pub fn result_type(tensors: &[&TensorInfo], scalars: &[Scalar]) -> Result<ScalarType, KernelError> {
    let ts = tensors.iter().map(|&&t| Opnd::Tensor(t));
    result_type_iter(ts.chain(scalars.iter().map(|&s| Opnd::Scalar(s))))
}

pub(super) fn result_type_iter(ops: impl Iterator<Item = Opnd>) -> Result<ScalarType, KernelError> {
    let mut dim: Option<ScalarType> = None;
    let mut zero: Option<ScalarType> = None;
    let mut wrapped: Option<ScalarType> = None;
    fn upd(slot: &mut Option<ScalarType>, t: ScalarType) -> Result<(), KernelError> {
        *slot = Some(match *slot {
            None => t,
            Some(s) => promote_types(s, t)?,
        });
        Ok(())
    }
    for o in ops {
        match o {
            Opnd::Tensor(t) => {
                require_supported("type promotion", t.dtype())?;
                if t.rank() == 0 {
                    upd(&mut zero, t.dtype())?;
                } else {
                    upd(&mut dim, t.dtype())?;
                }
            }
            Opnd::Scalar(s) => upd(&mut wrapped, scalar_dtype(s))?,
        }
    }
    let r = combine_categories(dim, zero)?;
    let r = combine_categories(r, wrapped)?;
    r.ok_or_else(|| KernelError::invalid("result_type of nothing"))
}

/// PyTorch's `canCast(from, to)`: no float → integral, no non-bool → bool.
pub fn can_cast(from: ScalarType, to: ScalarType) -> bool {
    if from.is_floating() && to.is_integral(true) {
        return false;
    }
    if from != ScalarType::Bool && to == ScalarType::Bool {
        return false;
    }
    true
}

pub fn require_can_cast(
    op: &'static str,
    from: ScalarType,
    to: ScalarType,
) -> Result<(), KernelError> {
    if can_cast(from, to) {
        Ok(())
    } else {
        Err(KernelError::invalid(format!(
            "{op}: result type {from} can't be cast to the desired output type {to}"
        )))
    }
}
