//! The CPU's instruction-set features, detected once per process, and the process-wide cap
//! on the SIMD level kernels use. The only place that asks the CPU what it supports: the SIMD
//! tokens ([`crate::simd`]) and the int8 paths of other crates read [`features`].

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// The instruction sets the kernels have paths for, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Portable = 1,
    Avx2 = 2,
    Avx512 = 3,
}

impl Level {
    fn from_u8(v: u8) -> Level {
        match v {
            3 => Level::Avx512,
            2 => Level::Avx2,
            _ => Level::Portable,
        }
    }
}

/// What the CPU supports, as the kernels group it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// AVX2 and FMA (the [`Level::Avx2`] paths).
    pub avx2_fma: bool,
    /// AVX-512 F, VL and DQ with AVX2 and FMA (the [`Level::Avx512`] paths).
    pub avx512: bool,
    /// AVX-512 F, BW, VL and VNNI (int8 products).
    pub avx512_vnni: bool,
    /// AVX-512 VBMI and VNNI (int8 depthwise taps in pairs).
    pub avx512_vbmi_vnni: bool,
}

impl CpuFeatures {
    /// The best level these features run.
    pub fn best_level(&self) -> Level {
        if self.avx512 {
            Level::Avx512
        } else if self.avx2_fma {
            Level::Avx2
        } else {
            Level::Portable
        }
    }
}

/// This CPU's features (detected on the first call).
pub fn features() -> &'static CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    F.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    use std::arch::is_x86_feature_detected as has;
    let avx2_fma = has!("avx2") && has!("fma");
    CpuFeatures {
        avx2_fma,
        avx512: has!("avx512f") && has!("avx512vl") && has!("avx512dq") && avx2_fma,
        avx512_vnni: has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512vnni"),
        avx512_vbmi_vnni: has!("avx512vbmi") && has!("avx512vnni"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

static CAP: AtomicU8 = AtomicU8::new(Level::Avx512 as u8);

/// Caps, for the whole process, the SIMD level every kernel uses (float paths through
/// [`crate::simd::level`], and the int8 VNNI/VBMI paths, which need [`Level::Avx512`]): to
/// compare paths or to rule out an instruction set. Set it before loading methods: kernels
/// prepared at load (packed weights) follow the level of that moment. Default: no cap.
pub fn set_max_level(l: Level) {
    CAP.store(l as u8, Ordering::Relaxed);
}

/// The best level this CPU supports, lowered by [`set_max_level`].
pub fn max_level() -> Level {
    features()
        .best_level()
        .min(Level::from_u8(CAP.load(Ordering::Relaxed)))
}

/// Whether the int8 AVX-512 VNNI products may run (the CPU has them and the level is not
/// capped below AVX-512).
pub fn int8_vnni() -> bool {
    features().avx512_vnni && CAP.load(Ordering::Relaxed) == Level::Avx512 as u8
}

/// Whether the int8 AVX-512 VBMI + VNNI depthwise taps may run (as [`int8_vnni`]).
pub fn int8_vbmi_vnni() -> bool {
    features().avx512_vbmi_vnni && CAP.load(Ordering::Relaxed) == Level::Avx512 as u8
}
