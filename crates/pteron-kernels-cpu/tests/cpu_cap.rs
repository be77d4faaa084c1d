//! The process-wide SIMD cap (`cpu::set_max_level`): it lowers the level every kernel uses
//! and turns the int8 VNNI paths off below AVX-512 (the aarch64 dot products below NEON). A test binary of its own: the cap is
//! global, and no other test runs in this process meanwhile.

use pteron_kernels_cpu::cpu::{self, Level};
use pteron_kernels_cpu::simd;

#[test]
fn max_level_caps_every_path() {
    let best = cpu::features().best_level();
    assert_eq!(cpu::max_level(), best);
    assert_eq!(simd::level(), best);
    // Another architecture's levels cap at their tier.
    for cap in [Level::Portable, Level::Avx2, Level::Neon, Level::Simd128] {
        cpu::set_max_level(cap);
        let want = best.lower(cap);
        assert!(want.tier() <= cap.tier() && Level::all().contains(&want));
        assert_eq!(cpu::max_level(), want);
        assert_eq!(simd::level(), want);
        assert!(!cpu::int8_vnni() && !cpu::int8_vbmi_vnni());
        assert_eq!(
            cpu::int8_dotprod(),
            cpu::features().dotprod && cap != Level::Portable
        );
        // A thread's own cap still lowers it further, never raises it.
        simd::with_level(Level::Avx512, || assert_eq!(simd::level(), want));
        simd::with_level(Level::Portable, || {
            assert_eq!(simd::level(), Level::Portable)
        });
    }
    cpu::set_max_level(Level::Avx512);
    assert_eq!(simd::level(), best);
    assert_eq!(cpu::int8_vnni(), cpu::features().avx512_vnni);
    assert_eq!(cpu::int8_dotprod(), cpu::features().dotprod);
    assert_eq!(cpu::int8_i8mm(), cpu::features().i8mm);
}

#[test]
fn levels_line_up_by_tier() {
    assert_eq!(Level::all()[0], Level::Portable);
    assert!(Level::all().windows(2).all(|w| w[0].tier() < w[1].tier()));
    #[cfg(target_arch = "x86_64")]
    assert_eq!(Level::all(), &[Level::Portable, Level::Avx2, Level::Avx512]);
    #[cfg(target_arch = "aarch64")]
    {
        assert_eq!(Level::all(), &[Level::Portable, Level::Neon]);
        // Every aarch64 Linux CPU has NEON.
        assert_eq!(cpu::features().best_level(), Level::Neon);
    }
    #[cfg(target_arch = "wasm32")]
    assert_eq!(
        Level::all().last(),
        Some(&if cfg!(target_feature = "simd128") {
            Level::Simd128
        } else {
            Level::Portable
        })
    );
    for l in [
        Level::Portable,
        Level::Avx2,
        Level::Avx512,
        Level::Neon,
        Level::Simd128,
    ] {
        assert_eq!(l.lower(Level::Portable), Level::Portable);
        assert!(l.lower(l).tier() <= l.tier());
    }
}
