//! Random ops: `rand.out` (uniform on [0, 1)), `randn.out` (standard normal) and
//! `native_dropout.out`.
//!
//! **The values differ from ExecuTorch's.** ExecuTorch's portable kernels draw from a
//! `std::mt19937` seeded by `std::random_device` on every call, so their outputs are not
//! reproducible at all; pteron uses its own small generator instead: xoshiro256++ (Blackman and
//! Vigna), seeded per call by SplitMix64 from a process-wide stream that advances by one step on
//! every call. [`set_seed`] restarts the stream, which makes a sequence of runs reproducible.
//! Nothing here allocates. Uniform values are `u64 >> 11` scaled by 2⁻⁵³ (a double in [0, 1),
//! then cast to the output dtype as ExecuTorch casts its double); normal values come from the
//! Box–Muller transform in f64. Only shape, dtype and the statistics of the outputs can be
//! compared with ExecuTorch.
//!
//! `native_dropout` follows ExecuTorch's portable kernel: with `train` true (or None) and
//! `p > 0`, `mask = uniform >= p` and `out = mask ? input : 0`, **without** PyTorch's `1 / (1 - p)`
//! rescaling (ExecuTorch does not rescale); otherwise `out = input` and the mask is all true.

#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;

use pteron_core::{
    dispatch_float, ArgAccess, ArgView, DtypeSet, Element, Kernel, KernelContext, KernelError,
    KernelRegistry, ScalarType,
};

use crate::creation::size_arg;
use crate::util::{require_dtype, FLOATS};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::rand.out",
        Kernel::with_check(rand_out, check_rand).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::randn.out",
        Kernel::with_check(randn_out, check_randn).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::native_dropout.out",
        Kernel::with_check(native_dropout_out, check_dropout).dtypes(DtypeSet::ALL),
    );
}

// ---- the generator ----

const DEFAULT_SEED: u64 = 0x5EED_0F9E_7E0A;
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Restarts the process-wide random stream: the random kernels called after this produce the
/// same values in the same order for the same seed.
pub fn set_seed(seed: u64) {
    stream::set(seed);
}

/// The process-wide stream of per-call seeds: `seed + k × GOLDEN` for the k-th call.
#[cfg(target_has_atomic = "64")]
mod stream {
    use core::sync::atomic::{AtomicU64, Ordering};

    static STREAM: AtomicU64 = AtomicU64::new(super::DEFAULT_SEED);

    pub fn set(seed: u64) {
        STREAM.store(seed, Ordering::Relaxed);
    }

    pub fn next() -> u64 {
        STREAM.fetch_add(super::GOLDEN, Ordering::Relaxed)
    }
}

/// Without 64-bit atomics (Cortex-M): the seed in two halves (written only by `set`) and a
/// 32-bit call counter; the same sequence as above for the first 2³² calls after a seed.
#[cfg(not(target_has_atomic = "64"))]
mod stream {
    use core::sync::atomic::{AtomicU32, Ordering};

    static LO: AtomicU32 = AtomicU32::new(super::DEFAULT_SEED as u32);
    static HI: AtomicU32 = AtomicU32::new((super::DEFAULT_SEED >> 32) as u32);
    static CALLS: AtomicU32 = AtomicU32::new(0);

    pub fn set(seed: u64) {
        LO.store(seed as u32, Ordering::Relaxed);
        HI.store((seed >> 32) as u32, Ordering::Relaxed);
        CALLS.store(0, Ordering::Relaxed);
    }

    pub fn next() -> u64 {
        let k = CALLS.fetch_add(1, Ordering::Relaxed);
        let seed =
            u64::from(LO.load(Ordering::Relaxed)) | (u64::from(HI.load(Ordering::Relaxed)) << 32);
        seed.wrapping_add(u64::from(k).wrapping_mul(super::GOLDEN))
    }
}

/// SplitMix64 (Steele, Lea, Flood): one step.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(GOLDEN);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256++ 1.0 (Blackman, Vigna).
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator seeded from `seed` through SplitMix64 (never the all-zero state).
    pub fn new(seed: u64) -> Rng {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Rng { s }
    }

    /// The generator for one kernel call: the next seed of the process-wide stream.
    pub fn for_call() -> Rng {
        Rng::new(stream::next())
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A double uniform on [0, 1) (53 random bits).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Two independent standard normal doubles (Box–Muller).
    pub fn normal_pair(&mut self) -> (f64, f64) {
        let u1 = 1.0 - self.uniform(); // (0, 1]: the log is finite
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (core::f64::consts::TAU * u2).sin_cos();
        (r * c, r * s)
    }
}

/// `static_cast<T>(double)` (f16/bf16 through f32, as c10's conversions).
#[inline]
fn from_double<T: Element>(v: f64) -> T {
    if matches!(T::DTYPE, ScalarType::Half | ScalarType::BFloat16) {
        T::from_f64(v as f32 as f64)
    } else {
        T::from_f64(v)
    }
}

// ---- rand / randn ----

fn check_creation(a: &ArgView, op: &'static str) -> Result<(), KernelError> {
    a.int_list(0)?;
    require_dtype(op, a.tensor(1)?.dtype(), &FLOATS)
}
fn check_rand(a: &ArgView) -> Result<(), KernelError> {
    check_creation(a, "rand")
}
fn check_randn(a: &ArgView) -> Result<(), KernelError> {
    check_creation(a, "randn")
}

fn fill_uniform<T: Element>(out: &mut [T], rng: &mut Rng) {
    for v in out {
        *v = from_double(rng.uniform());
    }
}

fn fill_normal<T: Element>(out: &mut [T], rng: &mut Rng) {
    let mut chunks = out.chunks_exact_mut(2);
    for pair in &mut chunks {
        let (a, b) = rng.normal_pair();
        pair[0] = from_double(a);
        pair[1] = from_double(b);
    }
    if let [last] = chunks.into_remainder() {
        *last = from_double(rng.normal_pair().0);
    }
}

fn random_out(ctx: &mut KernelContext, normal: bool) -> Result<(), KernelError> {
    let op = if normal { "randn" } else { "rand" };
    let shape = size_arg(ctx, 0)?;
    ctx.resize(1, &shape)?;
    let ([], [mut o]) = ctx.io([], [1])?;
    let dt = o.info.dtype();
    let mut rng = Rng::for_call();
    // Elements are written in memory order: for i.i.d. values the dim order does not matter.
    dispatch_float!(dt, T => {
        let out = o.as_mut_slice::<T>()?;
        if normal { fill_normal(out, &mut rng) } else { fill_uniform(out, &mut rng) }
    }, _ => return Err(KernelError::dtype(dt, op)));
    Ok(())
}

fn rand_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    random_out(ctx, false)
}
fn randn_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    random_out(ctx, true)
}

// ---- native_dropout ----

/// Whether a call with these arguments draws a mask (ExecuTorch: `(train is None or train)
/// and p != 0`).
fn dropout_draws<'p>(a: &impl ArgAccess<'p>) -> Result<bool, KernelError> {
    let p = a.double(1)?;
    let train = match a.value(2)? {
        pteron_core::Value::None => true,
        _ => a.bool(2)?,
    };
    Ok(train && p != 0.0)
}

/// native_dropout.out: [input, p, train, out, mask].
fn check_dropout(a: &ArgView) -> Result<(), KernelError> {
    let op = "native_dropout";
    let (x, o, m) = (a.tensor(0)?, a.tensor(3)?, a.tensor(4)?);
    if !ScalarType::REAL_AND_BOOL.contains(&x.dtype()) {
        return Err(KernelError::dtype(x.dtype(), op));
    }
    if o.dtype() != x.dtype() {
        return Err(KernelError::dtype(o.dtype(), op));
    }
    if m.dtype() != ScalarType::Bool {
        return Err(KernelError::dtype(
            m.dtype(),
            "native_dropout: mask must be bool",
        ));
    }
    if dropout_draws(a)? {
        require_dtype(op, x.dtype(), &FLOATS)?;
    }
    same_dim_order(x, o, m)
}

fn same_dim_order(
    x: &pteron_core::TensorInfo,
    o: &pteron_core::TensorInfo,
    m: &pteron_core::TensorInfo,
) -> Result<(), KernelError> {
    if x.dim_order() != o.dim_order() || x.dim_order() != m.dim_order() {
        return Err(KernelError::unsupported(
            "native_dropout: input, out and mask must have the same dim order",
        ));
    }
    Ok(())
}

fn dropout<T: Element>(x: &[T], out: &mut [T], mask: &mut [u8], p: f64, rng: &mut Rng) {
    for ((o, m), &v) in out.iter_mut().zip(mask.iter_mut()).zip(x) {
        let keep = rng.uniform() >= p;
        *m = keep as u8;
        *o = if keep { v } else { T::from_f64(0.0) };
    }
}

fn native_dropout_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "native_dropout";
    let x = *ctx.tensor(0)?;
    same_dim_order(&x, ctx.tensor(3)?, ctx.tensor(4)?)?;
    let p = ctx.double(1)?;
    if !(0.0..=1.0).contains(&p) {
        return Err(KernelError::invalid(format!(
            "{op}: dropout probability has to be between 0 and 1, but got {p}"
        )));
    }
    let draws = dropout_draws(ctx)?;
    ctx.resize(3, x.sizes())?;
    ctx.resize(4, x.sizes())?;
    let ([xr], [mut o, m]) = ctx.io([0], [3, 4])?;
    if o.info.dtype() != x.dtype() {
        return Err(KernelError::dtype(o.info.dtype(), op));
    }
    if m.info.dtype() != ScalarType::Bool {
        return Err(KernelError::dtype(m.info.dtype(), op));
    }
    if !draws {
        o.bytes.copy_from_slice(xr.bytes);
        m.bytes.fill(1);
        return Ok(());
    }
    let mut rng = Rng::for_call();
    let dt = x.dtype();
    dispatch_float!(dt, T => dropout::<T>(xr.as_slice()?, o.as_mut_slice()?, m.bytes, p, &mut rng),
        _ => return Err(KernelError::dtype(dt, op)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::{Bool, ScalarType as St};

    fn mean_std(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
        (m, var.sqrt())
    }

    #[test]
    fn xoshiro_reference_values() {
        // xoshiro256++ from the state [1, 2, 3, 4] (the reference implementation's output).
        let mut r = Rng { s: [1, 2, 3, 4] };
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(got, vec![41943041, 58720359, 3588806011781223]);
        // SplitMix64 from 0: first output of the reference implementation.
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn rand_statistics() {
        let mut c = TestCall::new();
        c.int_list(&[40, 50]);
        let o = c.out(St::Float, &[40, 50]);
        c.ret(o);
        c.check(check_rand).unwrap();
        c.run(rand_out).unwrap();
        let v: Vec<f64> = c.output::<f32>(o).iter().map(|&x| x as f64).collect();
        assert!(v.iter().all(|&x| (0.0..=1.0).contains(&x)));
        let (m, s) = mean_std(&v);
        assert!((m - 0.5).abs() < 0.03, "mean {m}");
        assert!((s - (1.0f64 / 12.0).sqrt()).abs() < 0.03, "std {s}");
        // A second call gives other values.
        let first = c.output::<f32>(o);
        c.run(rand_out).unwrap();
        assert_ne!(first, c.output::<f32>(o));
    }

    #[test]
    fn randn_statistics_all_float_dtypes() {
        for dt in [St::Float, St::Double, St::Half, St::BFloat16] {
            let mut c = TestCall::new();
            c.int_list(&[2001]);
            let o = c.out(dt, &[2001]);
            c.ret(o);
            c.check(check_randn).unwrap();
            c.run(randn_out).unwrap();
            assert_eq!(c.info(o).sizes(), &[2001]);
            let v: Vec<f64> = match dt {
                St::Float => c.output::<f32>(o).iter().map(|&x| x as f64).collect(),
                St::Double => c.output::<f64>(o),
                St::Half => c
                    .output::<half::f16>(o)
                    .iter()
                    .map(|x| x.to_f64())
                    .collect(),
                _ => c
                    .output::<half::bf16>(o)
                    .iter()
                    .map(|x| x.to_f64())
                    .collect(),
            };
            let (m, s) = mean_std(&v);
            assert!(m.abs() < 0.1, "{dt}: mean {m}");
            assert!((s - 1.0).abs() < 0.1, "{dt}: std {s}");
        }
        // Integer outputs fail at load.
        let mut c = TestCall::new();
        c.int_list(&[3]);
        let o = c.out(St::Long, &[3]);
        c.ret(o);
        assert!(c.check(check_randn).is_err());
    }

    #[test]
    fn seeding_reproduces() {
        let run = || {
            let mut c = TestCall::new();
            c.int_list(&[8]);
            let o = c.out(St::Double, &[8]);
            c.ret(o);
            c.run(randn_out).unwrap();
            c.output::<f64>(o)
        };
        // Other tests advance the shared stream concurrently: compare generators directly.
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert_eq!(a.normal_pair(), b.normal_pair());
        assert_eq!(run().len(), 8);
    }

    fn dropout_call(x: &[f32], p: f64, train: Option<bool>) -> (TestCall, usize, usize) {
        let mut c = TestCall::new();
        c.tensor(&[x.len()], x);
        c.double(p);
        match train {
            Some(t) => c.bool(t),
            None => c.none(),
        };
        let o = c.out(St::Float, &[x.len()]);
        let m = c.out(St::Bool, &[x.len()]);
        c.ret(o);
        (c, o, m)
    }

    #[test]
    fn dropout_eval_is_identity() {
        let x = [1.0f32, -2., 3.];
        for (p, train) in [(0.5, Some(false)), (0.0, Some(true)), (1.0, Some(false))] {
            let (mut c, o, m) = dropout_call(&x, p, train);
            c.check(check_dropout).unwrap();
            c.run(native_dropout_out).unwrap();
            assert_eq!(c.output::<f32>(o), x.to_vec());
            assert_eq!(c.output::<Bool>(m), vec![Bool(1); 3]);
        }
    }

    #[test]
    fn dropout_train_statistics() {
        let x: Vec<f32> = (0..4000).map(|i| 1.0 + (i % 3) as f32).collect();
        let (mut c, o, m) = dropout_call(&x, 0.25, None);
        c.check(check_dropout).unwrap();
        c.run(native_dropout_out).unwrap();
        let (out, mask) = (c.output::<f32>(o), c.output::<Bool>(m));
        let kept = mask.iter().filter(|b| b.get()).count() as f64 / x.len() as f64;
        assert!((kept - 0.75).abs() < 0.03, "kept {kept}");
        for ((&v, &k), &xi) in out.iter().zip(&mask).zip(&x) {
            assert_eq!(v, if k.get() { xi } else { 0.0 });
        }
        // p = 1 drops everything.
        let (mut c, o, m) = dropout_call(&x[..10], 1.0, Some(true));
        c.run(native_dropout_out).unwrap();
        assert!(c.output::<f32>(o).iter().all(|&v| v == 0.0));
        assert!(c.output::<Bool>(m).iter().all(|b| !b.get()));
        // p outside [0, 1]: an error.
        let (mut c, _, _) = dropout_call(&x[..2], 1.5, Some(true));
        assert!(c.run(native_dropout_out).is_err());
    }

    #[test]
    fn dropout_train_needs_a_float_input() {
        let mut c = TestCall::new();
        c.tensor(&[2], &[1i64, 2]);
        c.double(0.5);
        c.bool(true);
        let o = c.out(St::Long, &[2]);
        c.out(St::Bool, &[2]);
        c.ret(o);
        assert!(c.check(check_dropout).is_err());
        // In eval mode any dtype is copied.
        let mut c = TestCall::new();
        c.tensor(&[2], &[1i64, 2]);
        c.double(0.5);
        c.bool(false);
        let o = c.out(St::Long, &[2]);
        c.out(St::Bool, &[2]);
        c.ret(o);
        c.check(check_dropout).unwrap();
        c.run(native_dropout_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![1, 2]);
    }
}
