//! The CPU's instruction-set features, detected once per process, and the process-wide cap
//! on the SIMD level kernels use. The only place that asks the CPU what it supports: the SIMD
//! tokens ([`crate::simd`]) and the int8 paths of other crates read [`features`].

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// The instruction sets the float kernels have paths for. Each architecture has its own
/// levels; they line up by *tier* (0: portable, 1: the baseline vector ISA — AVX2 + FMA on
/// x86-64, NEON on aarch64, SIMD128 on WebAssembly built with `+simd128` —, 2: the wide one,
/// AVX-512), so a cap or a test that names a
/// level of another architecture means the same tier here ([`Level::lower`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    Portable = 1,
    Avx2 = 2,
    Avx512 = 3,
    Neon = 4,
    Simd128 = 5,
}

impl Level {
    fn from_u8(v: u8) -> Level {
        match v {
            5 => Level::Simd128,
            4 => Level::Neon,
            3 => Level::Avx512,
            2 => Level::Avx2,
            _ => Level::Portable,
        }
    }

    /// 0 portable, 1 the baseline vector ISA (AVX2 + FMA, NEON), 2 the wide one (AVX-512).
    pub const fn tier(self) -> u8 {
        match self {
            Level::Portable => 0,
            Level::Avx2 | Level::Neon | Level::Simd128 => 1,
            Level::Avx512 => 2,
        }
    }

    /// The levels this architecture has paths for, best last.
    pub fn all() -> &'static [Level] {
        #[cfg(target_arch = "x86_64")]
        return &[Level::Portable, Level::Avx2, Level::Avx512];
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        return &[Level::Portable, Level::Neon];
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return &[Level::Portable, Level::Simd128];
        #[allow(unreachable_code)]
        &[Level::Portable]
    }

    /// The best level of this architecture that the CPU supports and whose tier is at most
    /// the lower of `self`'s and `other`'s (`Avx2.lower(Avx512)` is `Avx2` on x86-64 and
    /// `Neon` on aarch64 with NEON).
    pub fn lower(self, other: Level) -> Level {
        let tier = self.tier().min(other.tier());
        let best = features().best_level().tier();
        Level::all()
            .iter()
            .rev()
            .copied()
            .find(|l| l.tier() <= tier && l.tier() <= best)
            .unwrap_or(Level::Portable)
    }

    /// The name the CLI and docs use (`portable`, `avx2`, `avx512`, `neon`).
    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
            Level::Neon => "neon",
            Level::Simd128 => "simd128",
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
    /// aarch64 Advanced SIMD (the [`Level::Neon`] paths; every aarch64 Linux CPU has it).
    pub neon: bool,
    /// aarch64 FEAT_DotProd: `sdot`/`udot` (int8 products, four bytes per lane).
    pub dotprod: bool,
    /// aarch64 FEAT_I8MM: `usdot`/`sudot`/`smmla` (mixed-sign int8 products).
    pub i8mm: bool,
    /// WebAssembly SIMD128 (chosen when the module is built, not detected: a module built
    /// with `+simd128` does not load where it is missing).
    pub simd128: bool,
}

impl CpuFeatures {
    /// The best level these features run.
    pub fn best_level(&self) -> Level {
        if self.avx512 {
            Level::Avx512
        } else if self.avx2_fma {
            Level::Avx2
        } else if self.neon {
            Level::Neon
        } else if self.simd128 {
            Level::Simd128
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
        ..CpuFeatures::default()
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
fn detect() -> CpuFeatures {
    use std::arch::is_aarch64_feature_detected as has;
    CpuFeatures {
        neon: true,
        dotprod: has!("dotprod"),
        i8mm: has!("i8mm"),
        ..CpuFeatures::default()
    }
}

#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "aarch64", target_feature = "neon")
)))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

static CAP: AtomicU8 = AtomicU8::new(Level::Avx512 as u8);

/// Caps, for the whole process, the SIMD level every kernel uses (float paths through
/// [`crate::simd::level`]; the int8 VNNI/VBMI paths need tier 2 ([`Level::Avx512`]), the
/// int8 dot-product paths of aarch64 tier 1 ([`Level::Neon`])): to compare paths or to rule
/// out an instruction set. A level of another architecture caps at its tier
/// ([`Level::lower`]). Set it before loading methods: kernels prepared at load (packed
/// weights) follow the level of that moment. Default: no cap.
pub fn set_max_level(l: Level) {
    CAP.store(l as u8, Ordering::Relaxed);
}

/// The best level this CPU supports, lowered by [`set_max_level`].
pub fn max_level() -> Level {
    features().best_level().lower(cap())
}

fn cap() -> Level {
    Level::from_u8(CAP.load(Ordering::Relaxed))
}

/// Whether the int8 AVX-512 VNNI products may run (the CPU has them and the level is not
/// capped below AVX-512).
pub fn int8_vnni() -> bool {
    features().avx512_vnni && cap().tier() >= 2
}

/// Whether the int8 AVX-512 VBMI + VNNI depthwise taps may run (as [`int8_vnni`]).
pub fn int8_vbmi_vnni() -> bool {
    features().avx512_vbmi_vnni && cap().tier() >= 2
}

/// Whether the aarch64 `sdot` int8 products may run (the CPU has FEAT_DotProd and the level
/// is not capped to portable).
pub fn int8_dotprod() -> bool {
    features().dotprod && cap().tier() >= 1
}

/// Whether the aarch64 `sudot` int8 products may run (FEAT_I8MM, as [`int8_dotprod`]).
pub fn int8_i8mm() -> bool {
    features().i8mm && cap().tier() >= 1
}
