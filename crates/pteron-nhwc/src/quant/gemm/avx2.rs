//! AVX2 tile sums (`TileSums`) for x86-64 CPUs without AVX-512 VNNI: per quad, each 16-byte
//! group of 4 channels × 4 inputs is sign-extended to 16 i16 and multiplied with the row's
//! quad (zero-extended, broadcast) by `vpmaddwd`, which adds the products in pairs into i32:
//! exact for every byte value (unlike `vpmaddubsw`, whose i16 sums saturate), and no
//! zero-point correction since the activations stay unsigned.

use super::{QWeights, TileSums, NR, TR};
use core::arch::x86_64::*;

/// The kernel, when the CPU has AVX2 and the process's SIMD level allows it.
pub fn best() -> Option<TileSums> {
    let l = pteron_kernels_cpu::cpu::max_level();
    (l.tier() >= 1 && pteron_kernels_cpu::cpu::features().avx2_fma).then_some(avx2_sums as TileSums)
}

/// `TileSums` with AVX2, two rows at a time (8 accumulators).
fn avx2_sums(
    a: &[&[u8]],
    w: &QWeights,
    p: usize,
    q0: usize,
    q1: usize,
    _wsum: &[i32; NR],
    acc: &mut [[i32; NR]; TR],
) {
    assert!(pteron_kernels_cpu::cpu::features().avx2_fma);
    assert!(a.len() <= TR && q0 <= q1 && q1 <= w.quads);
    assert!(a.iter().all(|r| r.len() >= 4 * q1));
    let end = (p + 1)
        .checked_mul(w.quads)
        .and_then(|v| v.checked_mul(NR * 4));
    assert!(end.is_some_and(|e| e <= w.data.len()));
    // Safety: the CPU has AVX2 (asserted); rows hold 4·q1 bytes and panel p's quads
    // q0 .. q1 lie inside the weights (asserted).
    unsafe { sums(a, w, p, q0, q1, acc) }
}

#[target_feature(enable = "avx2")]
unsafe fn sums(
    a: &[&[u8]],
    w: &QWeights,
    p: usize,
    q0: usize,
    q1: usize,
    acc: &mut [[i32; NR]; TR],
) {
    let wp = w.data[p * w.quads * NR * 4..].as_ptr();
    for (pair, accs) in a.chunks(2).zip(acc.chunks_mut(2)) {
        let mut c = [[_mm256_setzero_si256(); 4]; 2];
        for q in q0..q1 {
            // Safety (loads): quad q < quads of panel p; 4 activation bytes at 4q < 4·q1.
            let wv: [__m256i; 4] = core::array::from_fn(|g| unsafe {
                _mm256_cvtepi8_epi16(_mm_loadu_si128(wp.add((q * NR + 4 * g) * 4) as *const _))
            });
            for (row, ci) in pair.iter().zip(c.iter_mut()) {
                let quad = unsafe { (row.as_ptr().add(4 * q) as *const u32).read_unaligned() };
                let a16 = _mm256_set1_epi64x(_mm_cvtsi128_si64(_mm_cvtepu8_epi16(
                    _mm_cvtsi32_si128(quad as i32),
                )));
                for (cg, wg) in ci.iter_mut().zip(&wv) {
                    *cg = _mm256_add_epi32(*cg, _mm256_madd_epi16(*wg, a16));
                }
            }
        }
        for (ci, acc) in c.iter().zip(accs.iter_mut()).take(pair.len()) {
            for (g, v) in ci.iter().enumerate() {
                let mut lanes = [0i32; 8];
                // Safety: `lanes` holds 8 i32.
                unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut _, *v) };
                // Lanes 2e, 2e + 1: the two pair sums of channel 4g + e.
                for e in 0..4 {
                    acc[4 * g + e] += lanes[2 * e] + lanes[2 * e + 1];
                }
            }
        }
    }
}

/// Every kernel the CPU has, by name (for tests).
#[cfg(test)]
pub fn available() -> Vec<(&'static str, TileSums)> {
    if pteron_kernels_cpu::cpu::features().avx2_fma {
        vec![("avx2", avx2_sums)]
    } else {
        Vec::new()
    }
}
