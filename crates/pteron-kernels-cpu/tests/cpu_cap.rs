//! The process-wide SIMD cap (`cpu::set_max_level`): it lowers the level every kernel uses
//! and turns the int8 VNNI paths off below AVX-512. A test binary of its own: the cap is
//! global, and no other test runs in this process meanwhile.

use pteron_kernels_cpu::cpu::{self, Level};
use pteron_kernels_cpu::simd;

#[test]
fn max_level_caps_every_path() {
    let best = cpu::features().best_level();
    assert_eq!(cpu::max_level(), best);
    assert_eq!(simd::level(), best);
    for cap in [Level::Portable, Level::Avx2] {
        cpu::set_max_level(cap);
        assert_eq!(cpu::max_level(), best.min(cap));
        assert_eq!(simd::level(), best.min(cap));
        assert!(!cpu::int8_vnni() && !cpu::int8_vbmi_vnni());
        // A thread's own cap still lowers it further, never raises it.
        simd::with_level(Level::Avx512, || assert_eq!(simd::level(), best.min(cap)));
    }
    cpu::set_max_level(Level::Avx512);
    assert_eq!(simd::level(), best);
    assert_eq!(cpu::int8_vnni(), cpu::features().avx512_vnni);
}
