//! Unary elementwise ops. Float functions of integer or bool inputs compute in float32 (PyTorch's
//! default dtype); f16/bf16 compute in f32 and round. Any dim order, 0-d and empty tensors.

#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use pteron_core::DtypeSet;
use pteron_core::{
    ArgAccess, ArgView, Dims, Kernel, KernelContext, KernelError, KernelRegistry, ScalarType,
};

use crate::elementwise::engine::*;
use crate::{with_float, with_num};

/// The compute dtype of a float function of `x`: its own dtype if floating, else float32.
fn float_common<'p>(v: &impl ArgAccess<'p>, out: usize) -> Result<ScalarType, KernelError> {
    let x = v.tensor(0)?.dtype();
    require_supported("unary op", x)?;
    let o = out_dtype(v, out)?;
    require_supported("unary op", o)?;
    let common = if x.is_floating() {
        x
    } else {
        ScalarType::Float
    };
    require_can_cast("unary op", common, o)?;
    Ok(common)
}

/// The `out` argument of a unary `.out` call (the last one is the returned value). A call with
/// fewer than two arguments (a hostile program) is an error, not an underflow.
fn out_arg(v: &ArgView<'_, '_>) -> Result<usize, KernelError> {
    v.num_args().checked_sub(2).ok_or(KernelError::ArgCount {
        expected: 2,
        got: v.num_args(),
    })
}

fn check_float_unary(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    float_common(v, out_arg(v)?).map(|_| ())
}

/// Float-only ops (no integer promotion), e.g. gelu.
fn float_only<'p>(v: &impl ArgAccess<'p>, out: usize) -> Result<ScalarType, KernelError> {
    let x = v.tensor(0)?.dtype();
    if !x.is_floating() {
        return Err(KernelError::dtype(x, "op supports floating inputs only"));
    }
    let o = out_dtype(v, out)?;
    require_supported("unary op", o)?;
    require_can_cast("unary op", x, o)?;
    Ok(x)
}

fn check_float_only(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    float_only(v, out_arg(v)?).map(|_| ())
}

/// Same-dtype ops over reals (no bool): abs, neg, relu, sign...
fn same_real<'p>(
    v: &impl ArgAccess<'p>,
    out: usize,
    allow_bool: bool,
) -> Result<ScalarType, KernelError> {
    let x = v.tensor(0)?.dtype();
    require_supported("unary op", x)?;
    if x == ScalarType::Bool && !allow_bool {
        return Err(KernelError::dtype(x, "op does not support bool"));
    }
    let o = out_dtype(v, out)?;
    require_supported("unary op", o)?;
    require_can_cast("unary op", x, o)?;
    Ok(x)
}

fn check_real(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    same_real(v, out_arg(v)?, false).map(|_| ())
}

fn check_real_bool(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    same_real(v, out_arg(v)?, true).map(|_| ())
}

fn check_any_in_out(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    require_supported("unary op", v.tensor(0)?.dtype())?;
    require_supported("unary op", out_dtype(v, out_arg(v)?)?)
}

/// Kernels `[self, out]` computing a float function (integer inputs promote to float32).
macro_rules! float_unary {
    ($($name:ident => |$x:ident| $body:expr;)*) => {$(
        fn $name(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
            let common = float_common(ctx, 1)?;
            let shape = ctx.tensor(0)?.dims();
            with_float!(comp_kind(common)?, C => run1::<C, C>(ctx, 0, 1, &shape, Some(common), |$x: C| $body),
                _ => unreachable!("float_common is floating"))
        }
    )*};
}

fn erf_c<C: Copy + Into<f64>>(x: C) -> f64 {
    erf(x.into())
}

float_unary! {
    exp_out => |x| x.exp();
    expm1_out => |x| x.exp_m1();
    log_out => |x| x.ln();
    log1p_out => |x| x.ln_1p();
    log2_out => |x| x.log2();
    log10_out => |x| x.log10();
    sqrt_out => |x| x.sqrt();
    rsqrt_out => |x| 1.0 / x.sqrt();
    reciprocal_out => |x| 1.0 / x;
    sin_out => |x| x.sin();
    cos_out => |x| x.cos();
    tan_out => |x| x.tan();
    asin_out => |x| x.asin();
    acos_out => |x| x.acos();
    atan_out => |x| x.atan();
    sinh_out => |x| x.sinh();
    cosh_out => |x| x.cosh();
    tanh_out => |x| x.tanh();
    asinh_out => |x| x.asinh();
    acosh_out => |x| x.acosh();
    atanh_out => |x| x.atanh();
    erf_out => |x| erf_c(x) as C;
    sigmoid_out => |x| 1.0 / (1.0 + (-x).exp());
    silu_out => |x| x / (1.0 + (-x).exp());
}

/// gelu.out: [self, approximate, out].
fn gelu_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let common = float_only(ctx, 2)?;
    let tanh_approx = match ctx.string(1)? {
        "none" => false,
        "tanh" => true,
        a => {
            return Err(KernelError::invalid(format!(
                "gelu: unknown approximate {a:?}"
            )))
        }
    };
    let shape = ctx.tensor(0)?.dims();
    with_float!(comp_kind(common)?, C => run1::<C, C>(ctx, 0, 2, &shape, Some(common), |x: C| {
        if tanh_approx {
            let k_beta = (core::f64::consts::SQRT_2 * core::f64::consts::FRAC_2_SQRT_PI * 0.5) as C;
            let inner = k_beta * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        } else {
            x * 0.5 * (1.0 + erf_c(x * core::f64::consts::FRAC_1_SQRT_2 as C) as C)
        }
    }), _ => unreachable!())
}

fn check_gelu(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    float_only(v, 2)?;
    match v.string(1)? {
        "none" | "tanh" => Ok(()),
        a => Err(KernelError::invalid(format!(
            "gelu: unknown approximate {a:?}"
        ))),
    }
}

/// elu.out: [self, alpha, scale, input_scale, out].
fn elu_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let common = float_only(ctx, 4)?;
    let (alpha, scale, iscale) = (ctx.double(1)?, ctx.double(2)?, ctx.double(3)?);
    let shape = ctx.tensor(0)?.dims();
    with_float!(comp_kind(common)?, C => {
        let (neg, pos, ni) = ((alpha * scale) as C, scale as C, iscale as C);
        run1::<C, C>(ctx, 0, 4, &shape, Some(common), |x: C| if x <= 0.0 { (x * ni).exp_m1() * neg } else { x * pos })
    }, _ => unreachable!())
}

/// logit.out: [self, eps?, out].
fn logit_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let common = float_common(ctx, 2)?;
    let eps = ctx.opt_double(1)?;
    let shape = ctx.tensor(0)?.dims();
    with_float!(comp_kind(common)?, C => {
        let eps = eps.map(|e| e as C);
        run1::<C, C>(ctx, 0, 2, &shape, Some(common), |x: C| {
            let z = match eps {
                Some(e) => if x < e { e } else if x > 1.0 - e { 1.0 - e } else { x },
                None => x,
            };
            (z / (1.0 - z)).ln()
        })
    }, _ => unreachable!())
}

/// Same-dtype numeric ops `[self, out]` (ints compute in i64, floats in f32/f64).
macro_rules! num_unary {
    ($($name:ident, $allow_bool:expr => |$x:ident| $body:expr;)*) => {$(
        fn $name(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
            let common = same_real(ctx, 1, $allow_bool)?;
            let shape = ctx.tensor(0)?.dims();
            with_num!(comp_kind(common)?, C => run1::<C, C>(ctx, 0, 1, &shape, Some(common), |$x: C| $body))
        }
    )*};
}

num_unary! {
    abs_out, false => |x| if x < C::ZERO { x.neg() } else { x };
    neg_out, false => |x| x.neg();
    relu_out, false => |x| if x.is_nan() || x > C::ZERO { x } else { C::ZERO };
    sign_out, true => |x| if x.is_nan() { x } else if x > C::ZERO { C::ONE } else if x < C::ZERO { C::ONE.neg() } else { C::ZERO };
}

/// Rounding ops: identity on integers.
macro_rules! round_unary {
    ($($name:ident => |$x:ident| $body:expr;)*) => {$(
        fn $name(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
            let common = same_real(ctx, 1, false)?;
            let shape = ctx.tensor(0)?.dims();
            with_float!(comp_kind(common)?, C => run1::<C, C>(ctx, 0, 1, &shape, Some(common), |$x: C| $body),
                _ => run1::<i64, i64>(ctx, 0, 1, &shape, Some(common), |v| v))
        }
    )*};
}

round_unary! {
    ceil_out => |x| x.ceil();
    floor_out => |x| x.floor();
    round_out => |x| x.round_ties_even();
    trunc_out => |x| x.trunc();
}

/// isnan.out / isinf.out: [self, out] → bool.
fn isnan_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = ctx.tensor(0)?.dims();
    run1::<f64, bool>(ctx, 0, 1, &shape, None, |x| x.is_nan())
}

fn isinf_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = ctx.tensor(0)?.dims();
    run1::<f64, bool>(ctx, 0, 1, &shape, None, |x| x.is_infinite())
}

/// logical_not.out: [self, out].
fn logical_not_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = ctx.tensor(0)?.dims();
    run1::<bool, bool>(ctx, 0, 1, &shape, None, |x| !x)
}

fn check_bitwise_not(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    bitwise_not_check(v)
}

fn bitwise_not_check<'p>(v: &impl ArgAccess<'p>) -> Result<(), KernelError> {
    let x = v.tensor(0)?.dtype();
    if !x.is_integral(true) || !is_supported(x) {
        return Err(KernelError::dtype(x, "bitwise_not"));
    }
    require_can_cast("bitwise_not", x, out_dtype(v, 1)?)
}

/// bitwise_not.out: [self, out] (bool: logical not).
fn bitwise_not_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    bitwise_not_check(ctx)?;
    let x = *ctx.tensor(0)?;
    if x.dtype() == ScalarType::Bool {
        run1::<bool, bool>(ctx, 0, 1, x.sizes(), None, |v| !v)
    } else {
        run1::<i64, i64>(ctx, 0, 1, x.sizes(), Some(x.dtype()), |v| !v)
    }
}

/// glu.out: [self, dim, out]: first half * sigmoid(second half) along `dim`.
fn glu_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let common = float_only(ctx, 2)?;
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid("glu does not support 0-d tensors"));
    }
    let dim = x.dim_index(ctx.int(1)?)?;
    let n = x.size(dim);
    if n % 2 != 0 {
        return Err(KernelError::shape(format!(
            "glu: halving dimension must be even, but dimension {dim} is size {n}"
        )));
    }
    let mut shape = x.dims();
    shape.as_mut_slice()[dim] = n / 2;
    ctx.resize(2, &shape)?;
    let half = n / 2;
    let ([xt], [mut o]) = ctx.io([0], [2])?;
    // The first half is `x` read over the out's shape; the second the same, `half` further on.
    let xs = Elems::of(&xt)?;
    let strides = Dims::from_slice(x.strides())?;
    let second = xs.skip(half * x.strides()[dim]);
    with_float!(comp_kind(common)?, C => {
        let (mut p, mut q) = ([C::default(); BLOCK], [C::default(); BLOCK]);
        stream(&mut o, &shape, &[strides, strides], Some(common), |blk, r| {
            let (p, q) = (&mut p[..r.len()], &mut q[..r.len()]);
            xs.gather(blk.offsets(0), p);
            second.gather(blk.offsets(1), q);
            for ((r, &p), &q) in r.iter_mut().zip(p.iter()).zip(q.iter()) {
                *r = p * (1.0 / (1.0 + (-q).exp()));
            }
            Ok(())
        })
    }, _ => unreachable!())
}

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    // `aten::<name>.out` for each (name, kernel), with one check and dtype set.
    macro_rules! unary {
        ($check:expr, $dtypes:expr, $($name:literal => $f:ident),* $(,)?) => {$(
            pteron_core::register_op!(S, r, concat!("aten::", $name, ".out"),
                Kernel::with_check($f, $check).dtypes($dtypes));
        )*};
    }
    unary!(check_float_unary, DtypeSet::ALL,
        "exp" => exp_out,
        "expm1" => expm1_out,
        "log" => log_out,
        "log1p" => log1p_out,
        "log2" => log2_out,
        "log10" => log10_out,
        "sqrt" => sqrt_out,
        "rsqrt" => rsqrt_out,
        "reciprocal" => reciprocal_out,
        "sin" => sin_out,
        "cos" => cos_out,
        "tan" => tan_out,
        "asin" => asin_out,
        "acos" => acos_out,
        "atan" => atan_out,
        "sinh" => sinh_out,
        "cosh" => cosh_out,
        "tanh" => tanh_out,
        "asinh" => asinh_out,
        "acosh" => acosh_out,
        "atanh" => atanh_out,
        "erf" => erf_out,
        "sigmoid" => sigmoid_out,
        "logit" => logit_out,
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::silu.out",
        Kernel::with_check(silu_out, check_float_only).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::gelu.out",
        Kernel::with_check(gelu_out, check_gelu).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::elu.out",
        Kernel::with_check(elu_out, check_float_only).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::glu.out",
        Kernel::with_check(glu_out, check_float_only).dtypes(DtypeSet::FLOAT),
    );
    unary!(check_real, DtypeSet::REAL, "abs" => abs_out, "neg" => neg_out, "relu" => relu_out);
    pteron_core::register_op!(
        S,
        r,
        "aten::sign.out",
        Kernel::with_check(sign_out, check_real_bool).dtypes(DtypeSet::ALL),
    );
    unary!(check_real, DtypeSet::REAL,
        "ceil" => ceil_out, "floor" => floor_out, "round" => round_out, "trunc" => trunc_out);
    pteron_core::register_op!(
        S,
        r,
        "aten::isnan.out",
        Kernel::with_check(isnan_out, check_any_in_out).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::isinf.out",
        Kernel::with_check(isinf_out, check_any_in_out).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::logical_not.out",
        Kernel::with_check(logical_not_out, check_any_in_out).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::bitwise_not.out",
        Kernel::with_check(bitwise_not_out, check_bitwise_not).dtypes(DtypeSet::INT_AND_BOOL),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise::tests_util::{b, close};
    use pteron_core::half::f16;
    use pteron_core::testing::TestCall;
    use pteron_core::{Bool, KernelFn};

    fn un_f32(k: KernelFn, x: &[f32]) -> Vec<f32> {
        let mut c = TestCall::new();
        c.tensor(&[x.len()], x);
        let o = c.out(ScalarType::Float, &[x.len()]);
        c.ret(o);
        c.check(check_float_unary)
            .or_else(|_| c.check(check_real))
            .unwrap();
        c.run(k).unwrap();
        c.output::<f32>(o)
    }

    #[test]
    fn float_functions_match_pytorch() {
        let x = [-2.0f32, -0.5, 0.0, 0.3, 1.7];
        // Reference values from torch (float32).
        let cases: [(KernelFn, [f32; 5]); 8] = [
            (exp_out, [0.13533528, 0.60653067, 1.0, 1.3498589, 5.4739475]),
            (
                tanh_out,
                [-0.96402758, -0.46211717, 0.0, 0.29131263, 0.93540907],
            ),
            (
                sigmoid_out,
                [0.11920292, 0.37754068, 0.5, 0.57444251, 0.8455348],
            ),
            (
                erf_out,
                [-0.99532229, -0.52049989, 0.0, 0.32862678, 0.98379046],
            ),
            (
                expm1_out,
                [-0.86466473, -0.39346933, 0.0, 0.34985882, 4.4739475],
            ),
            (
                atan_out,
                [-1.1071488, -0.4636476, 0.0, 0.29145682, 1.0390723],
            ),
            (
                sinh_out,
                [-3.6268604, -0.52109528, 0.0, 0.30452031, 2.645632],
            ),
            (
                silu_out,
                [-0.23840584, -0.18877034, 0.0, 0.17233276, 1.4374092],
            ),
        ];
        for (k, want) in cases {
            close(&un_f32(k, &x), &want, 2e-6);
        }
        let y = [0.25f32, 1.0, 4.0];
        close(&un_f32(sqrt_out, &y), &[0.5, 1.0, 2.0], 0.0);
        close(&un_f32(rsqrt_out, &y), &[2.0, 1.0, 0.5], 0.0);
        close(&un_f32(reciprocal_out, &y), &[4.0, 1.0, 0.25], 0.0);
        close(&un_f32(log_out, &y), &[-1.3862944, 0.0, 1.3862944], 1e-7);
        let l = un_f32(log_out, &[0.0, -1.0]);
        assert!(l[0] == f32::NEG_INFINITY && l[1].is_nan());
        close(&un_f32(neg_out, &[1.0, -2.0]), &[-1.0, 2.0], 0.0);
        close(&un_f32(abs_out, &[1.0, -2.0]), &[1.0, 2.0], 0.0);
        let r = un_f32(relu_out, &[-1.0, 2.0, f32::NAN]);
        assert!(r[0] == 0.0 && r[1] == 2.0 && r[2].is_nan());
        close(
            &un_f32(round_out, &[0.5, 1.5, 2.5, -0.5, -1.7]),
            &[0.0, 2.0, 2.0, -0.0, -2.0],
            0.0,
        );
        close(&un_f32(ceil_out, &[0.5, -1.5]), &[1.0, -1.0], 0.0);
        close(&un_f32(floor_out, &[0.5, -1.5]), &[0.0, -2.0], 0.0);
        close(&un_f32(trunc_out, &[0.5, -1.5]), &[0.0, -1.0], 0.0);
    }

    #[test]
    fn erf_accuracy() {
        // High-precision references.
        for (x, want) in [
            (0.1, 0.1124629160182849),
            (1.0, 0.8427007929497149),
            (2.4, 0.9993114861033550),
            (2.6, 0.9997639655834707),
            (3.5, 0.9999992569016276),
            (-5.0, -0.9999999999984626),
        ] {
            let got = erf(x);
            assert!((got - want).abs() < 1e-14, "erf({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn gelu_both_approximations() {
        let x = [-3.0f32, -0.5, 0.0, 0.7, 2.0];
        for (mode, want) in [
            (
                "none",
                [-0.004050225, -0.15426877, 0.0, 0.53062546, 1.9544997],
            ),
            (
                "tanh",
                [-0.0036374331, -0.154286, 0.0, 0.53057015, 1.9545977],
            ),
        ] {
            let mut c = TestCall::new();
            c.tensor(&[5], &x);
            c.string(mode);
            let o = c.out(ScalarType::Float, &[5]);
            c.ret(o);
            c.check(check_gelu).unwrap();
            c.run(gelu_out).unwrap();
            close(&c.output::<f32>(o), &want, 2e-6);
        }
    }

    #[test]
    fn int_input_promotes_to_float() {
        let mut c = TestCall::new();
        c.tensor(&[2, 1], &[0i64, 1]);
        let o = c.out(ScalarType::Float, &[2, 1]);
        c.ret(o);
        c.check(check_float_unary).unwrap();
        c.run(exp_out).unwrap();
        close(&c.output::<f32>(o), &[1.0, 2.7182817], 1e-7);
        // int out for a float function is rejected at load
        let mut c = TestCall::new();
        c.tensor(&[1], &[1i64]);
        let o = c.out(ScalarType::Long, &[1]);
        c.ret(o);
        assert!(c.check(check_float_unary).is_err());
        assert!(c.run(exp_out).is_err());
    }

    #[test]
    fn int_ops_and_bool_ops() {
        let mut c = TestCall::new();
        c.tensor(&[4], &[-3i32, 0, 5, i32::MIN]);
        let o = c.out(ScalarType::Int, &[4]);
        c.ret(o);
        c.run(neg_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![3, 0, -5, i32::MIN]);
        c.run(abs_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![3, 0, 5, i32::MIN]);
        c.run(relu_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![0, 0, 5, 0]);
        c.run(sign_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![-1, 0, 1, -1]);
        c.run(bitwise_not_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![2, -1, -6, i32::MAX]);
        c.run(floor_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![-3, 0, 5, i32::MIN]);

        let mut c = TestCall::new();
        c.tensor(&[3], &[0.0f32, f32::NAN, f32::INFINITY]);
        let o = c.out(ScalarType::Bool, &[3]);
        c.ret(o);
        c.run(isnan_out).unwrap();
        assert_eq!(c.output::<Bool>(o), b(&[false, true, false]));
        c.run(isinf_out).unwrap();
        assert_eq!(c.output::<Bool>(o), b(&[false, false, true]));
        c.run(logical_not_out).unwrap();
        assert_eq!(c.output::<Bool>(o), b(&[true, false, false]));

        let mut c = TestCall::new();
        c.tensor(&[2], &b(&[true, false]));
        let o = c.out(ScalarType::Bool, &[2]);
        c.ret(o);
        c.run(bitwise_not_out).unwrap();
        assert_eq!(c.output::<Bool>(o), b(&[false, true]));
        assert!(c.run(neg_out).is_err());
    }

    #[test]
    fn half_0d_empty_and_dim_order() {
        let mut c = TestCall::new();
        c.tensor::<f16>(&[], &[f16::from_f32(1.0)]);
        let o = c.out(ScalarType::Half, &[]);
        c.ret(o);
        c.run(exp_out).unwrap();
        assert_eq!(c.output::<f16>(o), vec![f16::from_f32(2.71875)]);

        let mut c = TestCall::new();
        c.tensor::<f32>(&[0, 2], &[]);
        let o = c.out(ScalarType::Float, &[0, 2]);
        c.ret(o);
        c.run(sigmoid_out).unwrap();
        assert!(c.output::<f32>(o).is_empty());

        // channels-last in, contiguous out: logical order out
        let mut c = TestCall::new();
        c.tensor_with_dim_order(&[1, 2, 1, 2], &[0, 2, 3, 1], &[1.0f32, 3.0, -2.0, -4.0]);
        let o = c.out(ScalarType::Float, &[1, 2, 1, 2]);
        c.ret(o);
        c.run(neg_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![-1.0, 2.0, -3.0, 4.0]);
    }

    #[test]
    fn glu_elu_logit() {
        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[1.0f32, 0.0, 2.0, 1.0]);
        c.int(-1);
        let o = c.out(ScalarType::Float, &[2, 2]);
        c.ret(o);
        c.run(glu_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[2, 1]);
        close(&c.output::<f32>(o), &[0.5, 1.4621172], 1e-6);

        let mut c = TestCall::new();
        c.tensor(&[2], &[-1.0f32, 2.0]);
        c.double(1.0);
        c.double(1.0);
        c.double(1.0);
        let o = c.out(ScalarType::Float, &[2]);
        c.ret(o);
        c.run(elu_out).unwrap();
        close(&c.output::<f32>(o), &[-0.63212055, 2.0], 1e-6);

        let mut c = TestCall::new();
        c.tensor(&[2], &[0.25f32, 0.0]);
        c.double(0.1);
        let o = c.out(ScalarType::Float, &[2]);
        c.ret(o);
        c.run(logit_out).unwrap();
        close(&c.output::<f32>(o), &[-1.0986123, -2.1972246], 1e-6);
    }

    #[test]
    fn glu_along_a_middle_dim_over_several_blocks() {
        // [3, 4, 50] halved along dim 1: 300 outputs, both halves strided.
        let x: Vec<f32> = (0..600).map(|i| ((i as f32) * 0.013).cos() * 3.0).collect();
        let mut c = TestCall::new();
        c.tensor(&[3, 4, 50], &x);
        c.int(1);
        let o = c.out(ScalarType::Float, &[3, 2, 50]);
        c.ret(o);
        c.run(glu_out).unwrap();
        let mut want = vec![];
        for a in 0..3 {
            for k in 0..2 {
                for i in 0..50 {
                    let (p, q) = (x[(a * 4 + k) * 50 + i], x[(a * 4 + k + 2) * 50 + i]);
                    want.push(p * (1.0 / (1.0 + (-q).exp())));
                }
            }
        }
        assert_eq!(c.output::<f32>(o), want);
    }
}

#[cfg(test)]
// Expected values are PyTorch's outputs as printed, not approximations of constants.
#[allow(clippy::approx_constant)]
mod torch_cases;
