//! Accuracy of the vectorized math against f64 references, on every SIMD level.

use pteron_kernels_cpu::math;
use pteron_kernels_cpu::simd::{Portable, Simd};

/// Applies `f` lane by lane through token `s` (through a buffer, so any token works).
fn eval<S: Simd>(s: S, f: impl Fn(S, S::V) -> S::V, x: &[f32]) -> Vec<f32> {
    let l = S::LANES;
    let mut out = vec![0.0; x.len()];
    for (a, o) in x.chunks(l).zip(out.chunks_mut(l)) {
        s.st_tail(o, f(s, s.ld_tail(a)));
    }
    out
}

fn grid(lo: f32, hi: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| lo + (hi - lo) * i as f32 / (n - 1) as f32)
        .collect()
}

fn check<S: Simd>(s: S) {
    // reduce_add_each: every lane is reduce_add of its vector, bit for bit (values of mixed
    // magnitudes and signs, so that the order of the additions shows in the last bits).
    let l = S::LANES;
    for seed in 0..20u32 {
        let vals: Vec<f32> = (0..l * l)
            .map(|i| {
                let h = (i as u32 ^ seed.wrapping_mul(0x9E37_79B9)).wrapping_mul(0x85EB_CA6B);
                let m = (h >> 8) as f32 / (1 << 24) as f32 - 0.5;
                m * [1e-3f32, 1.0, 7e3, 3e-7][(h % 4) as usize]
            })
            .collect();
        let vs: Vec<S::V> = vals.chunks(l).map(|c| s.ld(c)).collect();
        let mut got = vec![0.0f32; l];
        s.st(&mut got, s.reduce_add_each(&vs));
        for (k, v) in vs.iter().enumerate() {
            assert_eq!(
                got[k].to_bits(),
                s.reduce_add(*v).to_bits(),
                "lane {k} seed {seed}"
            );
        }
    }
    // clamp: aten::clamp's max-then-min bit for bit, NaN kept, zeros keeping their sign.
    let x = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        -0.5,
        0.5,
        6.0,
        6.5,
        -1e30,
        3.25,
    ];
    for (lo, hi) in [(0.0f32, 6.0f32), (-0.0, 6.0), (-1.0, 1.0)] {
        let got = eval(s, |s, v| math::clamp(s, v, s.splat(lo), s.splat(hi)), &x);
        for (v, g) in x.iter().zip(&got) {
            let r = if *v < lo { lo } else { *v };
            let want = if hi < r { hi } else { r };
            assert_eq!(g.to_bits(), want.to_bits(), "clamp({v}, {lo}, {hi})");
        }
    }
    // exp: relative error within 3 ulp where the result is normal.
    let x = grid(-85.9, 88.5, 200_001);
    for (v, got) in x.iter().zip(eval(s, math::exp, &x)) {
        let want = (*v as f64).exp();
        let rel = ((got as f64 - want) / want).abs();
        assert!(rel < 3.6e-7, "exp({v}) = {got}, want {want}");
    }
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 100.0, -100.0];
    let e = eval(s, math::exp, &specials);
    assert!(
        e[0].is_nan()
            && e[1] == f32::INFINITY
            && e[2] == 0.0
            && e[3] == f32::INFINITY
            && e[4] == 0.0
    );
    // erf, tanh: absolute error within 1e-6 (about 8 ulp of 1).
    let x = grid(-6.0, 6.0, 120_001);
    for (v, got) in x.iter().zip(eval(s, math::erf, &x)) {
        let want = pteron_kernels::elementwise::engine::erf(*v as f64);
        assert!(
            (got as f64 - want).abs() < 1e-6,
            "erf({v}) = {got}, want {want}"
        );
    }
    let x = grid(-10.0, 10.0, 200_001);
    for (v, got) in x.iter().zip(eval(s, math::tanh, &x)) {
        let want = (*v as f64).tanh();
        assert!(
            (got as f64 - want).abs() < 1e-6,
            "tanh({v}) = {got}, want {want}"
        );
    }
    let t = eval(
        s,
        math::tanh,
        &[1e-5, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY],
    );
    assert!(
        t[0] == 1e-5 && t[1].is_sign_negative() && t[2].is_nan() && t[3] == 1.0 && t[4] == -1.0
    );
    let t = eval(s, math::erf, &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
    assert!(t[0].is_nan() && t[1] == 1.0 && t[2] == -1.0);
}

#[test]
fn accuracy_on_every_level() {
    check(Portable);
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(s) = pteron_kernels_cpu::simd::Avx2::new() {
            check(s);
        }
        if let Some(s) = pteron_kernels_cpu::simd::Avx512::new() {
            check(s);
        }
    }
}

/// Bits of glibc's `expf` where the steps' fused multiply-adds matter (without them, the result
/// is one ulp lower), and at the edges of its range.
const EXPF_GOLDENS: [(u32, u32); 8] = [
    (0x4202_422f, 0x56fc_9f1c),
    (0xc27c_65d9, 0x11fa_2993),
    (0x0000_0000, 0x3f80_0000),
    (0x42b1_7217, 0x7f7f_ff84),
    (0x42b1_7218, 0x7f80_0000),
    (0xc2cf_f1b4, 0x0000_0001),
    (0xc2cf_f1b5, 0x0000_0000),
    (0xff80_0000, 0x0000_0000),
];

#[test]
fn expf_libc_gives_glibcs_bits() {
    for (x, want) in EXPF_GOLDENS {
        let got = math::expf_libc(f32::from_bits(x)).to_bits();
        assert_eq!(
            got,
            want,
            "expf({:e}) = {got:08x}, glibc {want:08x}",
            f32::from_bits(x)
        );
    }
    assert!(math::expf_libc(f32::NAN).is_nan());
    assert_eq!(math::expf_libc(f32::INFINITY), f32::INFINITY);
    assert_eq!(math::sigmoid_libc(0.0), 0.5);
    assert_eq!(math::sigmoid_libc(-200.0), 0.0);
    assert_eq!(math::sigmoid_libc(200.0), 1.0);
}

/// Every 4099th f32 (every sign, exponent and many mantissas) against the C library's `expf`
/// where that is glibc's on x86-64 (the comparison's one host; emulated aarch64 runs would
/// take the emulator's word for it).
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
fn expf_libc_equals_the_c_librarys_expf_sampled() {
    expf_against_libc(4099);
}

/// The same over every f32 (a few seconds in release).
#[test]
#[ignore = "4.3e9 inputs: cargo test --release -p pteron-kernels-cpu --test math -- --ignored"]
#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
fn expf_libc_equals_the_c_librarys_expf_everywhere() {
    expf_against_libc(1);
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
fn expf_against_libc(stride: u64) {
    // glibc's x86-64 expf without FMA (CPUs older than Haswell) rounds 2 inputs differently.
    if !std::is_x86_feature_detected!("fma") {
        return;
    }
    let mut differ = Vec::new();
    let mut b = 0u64;
    while b <= u32::MAX as u64 {
        let x = f32::from_bits(b as u32);
        let (got, want) = (math::expf_libc(x), x.exp());
        if got.to_bits() != want.to_bits() && !(got.is_nan() && want.is_nan()) && differ.len() < 8 {
            differ.push((b as u32, got.to_bits(), want.to_bits()));
        }
        b += stride;
    }
    assert!(differ.is_empty(), "(x, pteron, libc) bits: {differ:x?}");
}
