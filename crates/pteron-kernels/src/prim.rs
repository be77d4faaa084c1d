//! Scalar ("prim") ops: symbolic sizes and the `executorch_prim` arithmetic the exporter emits
//! for dynamic shapes and control flow. They write their result into the return slot.

#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use pteron_core::{
    ArgAccess, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry, Scalar, Value,
};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::sym_size.int",
        Kernel::new(sym_size).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::sym_numel",
        Kernel::new(sym_numel).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::sym_stride.int",
        Kernel::new(sym_stride).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::_local_scalar_dense",
        Kernel::new(local_scalar_dense).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::et_view.default",
        Kernel::new(et_view).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::add.Scalar",
        Kernel::new(|c| binary(c, add)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::sub.Scalar",
        Kernel::new(|c| binary(c, sub)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::mul.Scalar",
        Kernel::new(|c| binary(c, mul)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::truediv.Scalar",
        Kernel::new(|c| binary(c, truediv)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::floordiv.Scalar",
        Kernel::new(|c| binary(c, floordiv)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::floordiv.int",
        Kernel::new(|c| binary(c, floordiv)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::mod.Scalar",
        Kernel::new(|c| binary(c, modulo)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::mod.int",
        Kernel::new(|c| binary(c, modulo)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::sym_max.Scalar",
        Kernel::new(|c| binary(c, max)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::sym_min.Scalar",
        Kernel::new(|c| binary(c, min)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::eq.Scalar",
        Kernel::new(|c| compare(c, |o| o == core::cmp::Ordering::Equal)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::gt.Scalar",
        Kernel::new(|c| compare(c, |o| o == core::cmp::Ordering::Greater)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::lt.Scalar",
        Kernel::new(|c| compare(c, |o| o == core::cmp::Ordering::Less)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::ge.Scalar",
        Kernel::new(|c| compare(c, |o| o != core::cmp::Ordering::Less)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::le.Scalar",
        Kernel::new(|c| compare(c, |o| o != core::cmp::Ordering::Greater)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::neg.Scalar",
        Kernel::new(|c| unary(c, neg)),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::ceil.Scalar",
        Kernel::new(|c| unary(c, |s| round_with(s, f64::ceil))),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::round.Scalar",
        Kernel::new(|c| unary(c, |s| round_with(s, round_half_even))),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::trunc.Scalar",
        Kernel::new(|c| unary(c, |s| round_with(s, f64::trunc))),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::sym_float.Scalar",
        Kernel::new(|c| unary(c, |s| Ok(Scalar::Double(s.to_f64())))),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::sym_int.Scalar",
        Kernel::new(|c| unary(c, |s| Ok(Scalar::Int(s.to_i64())))),
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::sym_not.Scalar",
        Kernel::new(sym_not)
    );
    pteron_core::register_op!(
        S,
        r,
        "executorch_prim::sym_ite.Scalar",
        Kernel::new(sym_ite)
    );
}

fn to_value(s: Scalar) -> Value<'static> {
    match s {
        Scalar::Int(v) => Value::Int(v),
        Scalar::Double(v) => Value::Double(v),
        Scalar::Bool(v) => Value::Bool(v),
    }
}

fn last(c: &KernelContext) -> Result<usize, KernelError> {
    c.num_args().checked_sub(1).ok_or(KernelError::ArgCount {
        expected: 1,
        got: 0,
    })
}

fn sym_size(c: &mut KernelContext) -> Result<(), KernelError> {
    let t = *c.tensor(0)?;
    let d = t.dim_index(c.int(1)?)?;
    let v = t.sizes().get(d).copied().unwrap_or(1) as i64;
    let o = last(c)?;
    c.set_value(o, Value::Int(v))
}

fn sym_stride(c: &mut KernelContext) -> Result<(), KernelError> {
    let t = *c.tensor(0)?;
    let d = t.dim_index(c.int(1)?)?;
    let v = t.strides().get(d).copied().unwrap_or(1) as i64;
    let o = last(c)?;
    c.set_value(o, Value::Int(v))
}

fn sym_numel(c: &mut KernelContext) -> Result<(), KernelError> {
    let n = c.tensor(0)?.numel() as i64;
    let o = last(c)?;
    c.set_value(o, Value::Int(n))
}

fn local_scalar_dense(c: &mut KernelContext) -> Result<(), KernelError> {
    let t = *c.tensor(0)?;
    if t.numel() != 1 {
        return Err(KernelError::shape(format!(
            "_local_scalar_dense needs one element, got {:?}",
            t
        )));
    }
    let ([x], []) = c.io([0], [])?;
    let v = pteron_core::dispatch_dtype!(t.dtype(), T => {
        let e: T = x.as_slice::<T>()?[0];
        if t.dtype().is_floating() {
            Value::Double(pteron_core::Element::to_f64(e))
        } else if t.dtype() == pteron_core::ScalarType::Bool {
            Value::Bool(pteron_core::Element::to_bool(e))
        } else {
            Value::Int(pteron_core::Element::to_i64(e))
        }
    }, _ => return Err(KernelError::dtype(t.dtype(), "_local_scalar_dense")));
    let o = last(c)?;
    c.set_value(o, v)
}

/// `et_view(self, size, out)`: `out` becomes an alias of `self` with the new sizes.
fn et_view(c: &mut KernelContext) -> Result<(), KernelError> {
    let numel = c.tensor(0)?.numel();
    let list = c.int_list(1)?;
    let mut buf = [0i64; pteron_core::MAX_RANK];
    let sizes = list.read_into(&mut buf)?;
    let mut dims = [0usize; pteron_core::MAX_RANK];
    let mut infer = None;
    let mut known = 1usize;
    for (k, &s) in sizes.iter().enumerate() {
        if s == -1 && infer.is_none() {
            infer = Some(k);
        } else if s < 0 {
            return Err(KernelError::invalid(format!("et_view: invalid size {s}")));
        } else {
            dims[k] = s as usize;
            known = known
                .checked_mul(s as usize)
                .ok_or(KernelError::SizeOverflow)?;
        }
    }
    if let Some(k) = infer {
        if known == 0 || numel % known != 0 {
            return Err(KernelError::shape(format!(
                "et_view: cannot infer size for {numel} elements from {sizes:?}"
            )));
        }
        dims[k] = numel / known;
    }
    let n = sizes.len();
    c.set_view(2, 0, &dims[..n])
}

fn scalar_arg(c: &KernelContext, i: usize) -> Result<Scalar, KernelError> {
    c.scalar(i)
}

fn binary(
    c: &mut KernelContext,
    f: fn(Scalar, Scalar) -> Result<Scalar, KernelError>,
) -> Result<(), KernelError> {
    let r = f(scalar_arg(c, 0)?, scalar_arg(c, 1)?)?;
    let o = last(c)?;
    c.set_value(o, to_value(r))
}

fn unary(
    c: &mut KernelContext,
    f: fn(Scalar) -> Result<Scalar, KernelError>,
) -> Result<(), KernelError> {
    let r = f(scalar_arg(c, 0)?)?;
    let o = last(c)?;
    c.set_value(o, to_value(r))
}

fn compare(c: &mut KernelContext, f: fn(core::cmp::Ordering) -> bool) -> Result<(), KernelError> {
    let (a, b) = (scalar_arg(c, 0)?, scalar_arg(c, 1)?);
    let ord = match (a, b) {
        (Scalar::Double(_), _) | (_, Scalar::Double(_)) => a
            .to_f64()
            .partial_cmp(&b.to_f64())
            .ok_or_else(|| KernelError::invalid("comparison with NaN"))?,
        _ => a.to_i64().cmp(&b.to_i64()),
    };
    let o = last(c)?;
    c.set_value(o, Value::Bool(f(ord)))
}

fn ints(a: Scalar, b: Scalar) -> Option<(i64, i64)> {
    match (a, b) {
        (Scalar::Double(_), _) | (_, Scalar::Double(_)) => None,
        _ => Some((a.to_i64(), b.to_i64())),
    }
}

fn overflow() -> KernelError {
    KernelError::invalid("integer overflow in scalar arithmetic")
}

fn add(a: Scalar, b: Scalar) -> Result<Scalar, KernelError> {
    Ok(match ints(a, b) {
        Some((x, y)) => Scalar::Int(x.checked_add(y).ok_or_else(overflow)?),
        None => Scalar::Double(a.to_f64() + b.to_f64()),
    })
}
fn sub(a: Scalar, b: Scalar) -> Result<Scalar, KernelError> {
    Ok(match ints(a, b) {
        Some((x, y)) => Scalar::Int(x.checked_sub(y).ok_or_else(overflow)?),
        None => Scalar::Double(a.to_f64() - b.to_f64()),
    })
}
fn mul(a: Scalar, b: Scalar) -> Result<Scalar, KernelError> {
    Ok(match ints(a, b) {
        Some((x, y)) => Scalar::Int(x.checked_mul(y).ok_or_else(overflow)?),
        None => Scalar::Double(a.to_f64() * b.to_f64()),
    })
}
fn truediv(a: Scalar, b: Scalar) -> Result<Scalar, KernelError> {
    Ok(Scalar::Double(a.to_f64() / b.to_f64()))
}
/// Python `//`: rounds toward negative infinity.
fn floordiv(a: Scalar, b: Scalar) -> Result<Scalar, KernelError> {
    Ok(match ints(a, b) {
        Some((_, 0)) => return Err(KernelError::invalid("integer division by zero")),
        Some((x, y)) => {
            let q = x.checked_div(y).ok_or_else(overflow)?;
            Scalar::Int(if (x % y != 0) && ((x < 0) != (y < 0)) {
                q - 1
            } else {
                q
            })
        }
        None => Scalar::Double((a.to_f64() / b.to_f64()).floor()),
    })
}
/// Python `%`: the result has the sign of the divisor.
fn modulo(a: Scalar, b: Scalar) -> Result<Scalar, KernelError> {
    Ok(match ints(a, b) {
        Some((_, 0)) => return Err(KernelError::invalid("integer modulo by zero")),
        Some((x, y)) => {
            let r = x.checked_rem(y).ok_or_else(overflow)?;
            Scalar::Int(if r != 0 && ((r < 0) != (y < 0)) {
                r + y
            } else {
                r
            })
        }
        None => {
            let (x, y) = (a.to_f64(), b.to_f64());
            let r = x % y;
            Scalar::Double(if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
                r + y
            } else {
                r
            })
        }
    })
}
fn max(a: Scalar, b: Scalar) -> Result<Scalar, KernelError> {
    Ok(match ints(a, b) {
        Some((x, y)) => Scalar::Int(x.max(y)),
        None => Scalar::Double(a.to_f64().max(b.to_f64())),
    })
}
fn min(a: Scalar, b: Scalar) -> Result<Scalar, KernelError> {
    Ok(match ints(a, b) {
        Some((x, y)) => Scalar::Int(x.min(y)),
        None => Scalar::Double(a.to_f64().min(b.to_f64())),
    })
}
fn neg(a: Scalar) -> Result<Scalar, KernelError> {
    Ok(match a {
        Scalar::Double(v) => Scalar::Double(-v),
        other => Scalar::Int(other.to_i64().checked_neg().ok_or_else(overflow)?),
    })
}
fn round_half_even(v: f64) -> f64 {
    let r = v.round();
    if (v - v.trunc()).abs() == 0.5 {
        2.0 * (v / 2.0).round()
    } else {
        r
    }
}
/// ceil/round/trunc of a float give an int (Python semantics); ints pass through.
fn round_with(a: Scalar, f: fn(f64) -> f64) -> Result<Scalar, KernelError> {
    Ok(match a {
        Scalar::Double(v) if v.is_finite() => Scalar::Int(f(v) as i64),
        Scalar::Double(v) => {
            return Err(KernelError::invalid(format!("cannot round {v} to an int")))
        }
        other => Scalar::Int(other.to_i64()),
    })
}
fn sym_not(c: &mut KernelContext) -> Result<(), KernelError> {
    let v = c.bool(0)?;
    let o = last(c)?;
    c.set_value(o, Value::Bool(!v))
}
fn sym_ite(c: &mut KernelContext) -> Result<(), KernelError> {
    let cond = c.bool(0)?;
    let r = if cond { c.scalar(1)? } else { c.scalar(2)? };
    let o = last(c)?;
    c.set_value(o, to_value(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::ScalarType;

    fn run_binary(
        name: fn(&mut KernelContext) -> Result<(), KernelError>,
        a: Value<'static>,
        b: Value<'static>,
    ) -> Value<'static> {
        let mut c = TestCall::new();
        let push = |c: &mut TestCall, v: Value<'static>| match v {
            Value::Int(x) => c.int(x),
            Value::Double(x) => c.double(x),
            Value::Bool(x) => c.bool(x),
            _ => unreachable!(),
        };
        push(&mut c, a);
        push(&mut c, b);
        let o = c.ret_value(Value::Int(0));
        c.run(name).unwrap();
        c.value(o)
    }

    fn kernel(name: &str) -> fn(&mut KernelContext) -> Result<(), KernelError> {
        let mut r = KernelRegistry::new();
        register::<pteron_core::AllOps>(&mut r);
        r.get(name).unwrap().run
    }

    #[test]
    fn python_floor_division_and_modulo() {
        let cases = [
            (7, 2, 3, 1),
            (-7, 2, -4, 1),
            (7, -2, -4, -1),
            (-7, -2, 3, -1),
            (6, 3, 2, 0),
        ];
        for (a, b, q, r) in cases {
            let got = run_binary(
                kernel("executorch_prim::floordiv.int"),
                Value::Int(a),
                Value::Int(b),
            );
            assert!(matches!(got, Value::Int(v) if v == q), "{a}//{b} = {got:?}");
            let got = run_binary(
                kernel("executorch_prim::mod.int"),
                Value::Int(a),
                Value::Int(b),
            );
            assert!(matches!(got, Value::Int(v) if v == r), "{a}%{b} = {got:?}");
        }
        let mut c = TestCall::new();
        c.int(1);
        c.int(0);
        c.ret_value(Value::Int(0));
        assert!(c.run(kernel("executorch_prim::floordiv.int")).is_err());
    }

    #[test]
    fn arithmetic_promotes_to_double() {
        let got = run_binary(
            kernel("executorch_prim::add.Scalar"),
            Value::Int(2),
            Value::Double(0.5),
        );
        assert!(matches!(got, Value::Double(v) if v == 2.5));
        let got = run_binary(
            kernel("executorch_prim::truediv.Scalar"),
            Value::Int(7),
            Value::Int(2),
        );
        assert!(matches!(got, Value::Double(v) if v == 3.5));
        let got = run_binary(
            kernel("executorch_prim::mul.Scalar"),
            Value::Int(6),
            Value::Int(7),
        );
        assert!(matches!(got, Value::Int(42)));
        let got = run_binary(
            kernel("executorch_prim::ge.Scalar"),
            Value::Int(2),
            Value::Double(2.0),
        );
        assert!(matches!(got, Value::Bool(true)));
    }

    #[test]
    fn sym_size_reads_current_sizes() {
        let mut c = TestCall::new();
        c.tensor(&[2, 5], &[0f32; 10]);
        c.int(-1);
        let o = c.ret_value(Value::Int(0));
        c.run(sym_size).unwrap();
        assert!(matches!(c.value(o), Value::Int(5)));
    }

    #[test]
    fn et_view_aliases_input() {
        let mut c = TestCall::new();
        let x = c.tensor(&[2, 3], &[1f32, 2., 3., 4., 5., 6.]);
        c.int_list(&[3, -1]);
        let o = c.out(ScalarType::Float, &[1, 1]);
        c.ret(o);
        c.run(et_view).unwrap();
        assert_eq!(c.info(o).sizes(), &[3, 2]);
        assert_eq!(c.output::<f32>(o), c.output::<f32>(x));
    }
}
