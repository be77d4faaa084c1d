//! aarch64 tile sums (`TileSums`) over the packed quads: per quad, panel `p`'s 64 weight
//! bytes are four registers of 4 channels × 4 inputs, and one activation register holds four
//! quads of a row, so one lane-indexed dot product adds a quad's 4 products for 4 channels.
//!
//! - FEAT_I8MM: `sudot` multiplies the signed weights by the unsigned activations as stored.
//! - FEAT_DotProd: `sdot` on activations flipped to signed (`a − 128`), then `+ 128·Σw`.
//! - NEON only: widening multiplies (`smull`) of the weights by a broadcast quad, pairwise
//!   accumulated (`sadalp`), then `+ 128·Σw`.
//!
//! `sdot`/`sudot` are written as inline assembly: their intrinsics are not stable in Rust.

use super::{SumsIn, TileSums, NR, TR};
use core::arch::aarch64::*;
use core::arch::asm;

/// The best kernel the CPU and the process's SIMD cap allow (`None`: portable).
pub fn best() -> Option<TileSums> {
    use pteron_kernels_cpu::cpu;
    if cpu::int8_i8mm() {
        Some(sudot_sums)
    } else if cpu::int8_dotprod() {
        Some(sdot_sums)
    } else if cpu::max_level() == cpu::Level::Neon {
        Some(mull_sums)
    } else {
        None
    }
}

/// Every kernel the CPU has, by name (for tests).
#[cfg(test)]
pub fn available() -> Vec<(&'static str, TileSums)> {
    let f = pteron_kernels_cpu::cpu::features();
    let mut v: Vec<(&'static str, TileSums)> = vec![("neon smull", mull_sums)];
    if f.dotprod {
        v.push(("sdot", sdot_sums));
    }
    if f.i8mm {
        v.push(("sudot", sudot_sums));
    }
    v
}

/// Lanes of the four accumulators of a row (4 channels each) into `acc`, plus `128·wsum`
/// when the products were of flipped activations.
///
/// # Safety
/// NEON (baseline on this target).
#[inline(always)]
unsafe fn finish(c: &[int32x4_t; 4], wsum: &[i32; NR], flipped: bool, acc: &mut [i32; NR]) {
    for (g, v) in c.iter().enumerate() {
        // Safety: `acc` and `wsum` hold 16 i32, lanes 4·g .. 4·g + 4 of them are read.
        unsafe {
            let at = acc.as_mut_ptr().add(g * 4);
            let mut s = vaddq_s32(vld1q_s32(at), *v);
            if flipped {
                s = vmlaq_n_s32(s, vld1q_s32(wsum.as_ptr().add(g * 4)), 128);
            }
            vst1q_s32(at, s);
        }
    }
}

/// The activation bytes of quads `q .. q + 4` of `row` (16 bytes; past `q1` filled with
/// `fill`), flipped to signed when `flip`.
///
/// # Safety
/// NEON; `row` holds at least `4·q1` bytes.
#[inline(always)]
unsafe fn quads4(row: &[u8], q: usize, q1: usize, fill: u8, flip: bool) -> int8x16_t {
    let v = if q + 4 <= q1 {
        // Safety: 4·(q + 4) ≤ 4·q1 ≤ row.len().
        unsafe { vld1q_u8(row.as_ptr().add(q * 4)) }
    } else {
        let mut t = [fill; 16];
        let n = 4 * (q1 - q);
        t[..n].copy_from_slice(&row[q * 4..q * 4 + n]);
        // Safety: `t` holds 16 bytes.
        unsafe { vld1q_u8(t.as_ptr()) }
    };
    // Safety: NEON.
    unsafe {
        if flip {
            vreinterpretq_s8_u8(veorq_u8(v, vdupq_n_u8(0x80)))
        } else {
            vreinterpretq_s8_u8(v)
        }
    }
}

/// One quad (lane `L` of each row's activation register) into the accumulators of `R`
/// rows, with `sudot` when `SU`, else `sdot`.
///
/// # Safety
/// FEAT_DotProd (and FEAT_I8MM when `SU`); `wq` points at the quad's 64 weight bytes.
#[inline(always)]
unsafe fn dot_quad<const L: usize, const SU: bool, const R: usize>(
    c: &mut [[int32x4_t; 4]; R],
    wq: *const i8,
    av: &[int8x16_t; R],
) {
    // Safety: the caller's.
    let wv = unsafe { [0, 16, 32, 48].map(|o| vld1q_s8(wq.add(o))) };
    for (ci, a) in c.iter_mut().zip(av) {
        for (acc, wg) in ci.iter_mut().zip(&wv) {
            // Safety: the caller's features; registers only.
            unsafe {
                if SU {
                    asm!("sudot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{l}]",
                        acc = inout(vreg) *acc, w = in(vreg) *wg, a = in(vreg) *a, l = const L,
                        options(pure, nomem, nostack, preserves_flags));
                } else {
                    asm!("sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{l}]",
                        acc = inout(vreg) *acc, w = in(vreg) *wg, a = in(vreg) *a, l = const L,
                        options(pure, nomem, nostack, preserves_flags));
                }
            }
        }
    }
}

/// The body of the two dot-product kernels for `R = a.len()` rows.
///
/// # Safety
/// FEAT_DotProd (and FEAT_I8MM when `SU`).
#[inline(always)]
unsafe fn dot_sums<const SU: bool, const R: usize>(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]) {
    let SumsIn {
        a, q0, q1, wsum, ..
    } = *t;
    let wp = t.panel();
    assert_eq!(a.len(), R);
    // Safety: NEON.
    let mut c = [[unsafe { vdupq_n_s32(0) }; 4]; R];
    // Past `q1`: activations that add nothing (0 unsigned, 128 before the flip).
    let fill = if SU { 0 } else { 0x80 };
    let mut q = q0;
    while q < q1 {
        // Safety: rows hold 4·q1 bytes (`check`).
        let av: [int8x16_t; R] =
            core::array::from_fn(|i| unsafe { quads4(a[i], q, q1, fill, !SU) });
        let n = (q1 - q).min(4);
        // Safety: quads q .. q + n < quads of panel p (`check`); the caller's features.
        unsafe {
            let wq = |l: usize| wp.add((q + l) * NR * 4);
            dot_quad::<0, SU, R>(&mut c, wq(0), &av);
            if n > 1 {
                dot_quad::<1, SU, R>(&mut c, wq(1), &av);
            }
            if n > 2 {
                dot_quad::<2, SU, R>(&mut c, wq(2), &av);
            }
            if n > 3 {
                dot_quad::<3, SU, R>(&mut c, wq(3), &av);
            }
        }
        q += 4;
    }
    for (ci, acc) in c.iter().zip(acc.iter_mut()) {
        // Safety: NEON.
        unsafe { finish(ci, wsum, !SU, acc) };
    }
}

/// `dot_sums` for the number of rows in `a`.
///
/// # Safety
/// As `dot_sums`.
#[inline(always)]
unsafe fn dot_rows<const SU: bool>(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]) {
    // Safety: the caller's.
    unsafe {
        match t.a.len() {
            1 => dot_sums::<SU, 1>(t, acc),
            2 => dot_sums::<SU, 2>(t, acc),
            3 => dot_sums::<SU, 3>(t, acc),
            _ => dot_sums::<SU, TR>(t, acc),
        }
    }
}

#[target_feature(enable = "dotprod,i8mm")]
unsafe fn sudot_inner(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]) {
    // Safety: this function's features.
    unsafe { dot_rows::<true>(t, acc) }
}

#[target_feature(enable = "dotprod")]
unsafe fn sdot_inner(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]) {
    // Safety: this function's features.
    unsafe { dot_rows::<false>(t, acc) }
}

/// `TileSums` with `sudot` (FEAT_I8MM).
fn sudot_sums(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]) {
    assert!(pteron_kernels_cpu::cpu::features().i8mm);
    // Safety: the CPU has FEAT_I8MM (just checked; it implies the dot products).
    unsafe { sudot_inner(t, acc) }
}

/// `TileSums` with `sdot` (FEAT_DotProd).
fn sdot_sums(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]) {
    assert!(pteron_kernels_cpu::cpu::features().dotprod);
    // Safety: the CPU has FEAT_DotProd (just checked).
    unsafe { sdot_inner(t, acc) }
}

/// The activation register `a` with its 32-bit lane `L` (a quad) in every lane.
///
/// # Safety
/// NEON (baseline on this target).
#[inline(always)]
unsafe fn dup_quad<const L: i32>(a: int8x16_t) -> int8x16_t {
    // Safety: the caller's.
    unsafe { vreinterpretq_s8_s32(vdupq_laneq_s32::<L>(vreinterpretq_s32_s8(a))) }
}

/// Adds one quad's products (weights `w`, the quad broadcast in `d`) into a row's
/// accumulators: `smull` per half, pairwise-added into i32 (`sadalp`).
///
/// # Safety
/// NEON.
#[inline(always)]
unsafe fn mull_one(c: &mut [[int32x4_t; 2]; 4], w: &[int8x16_t; 4], d: int8x16_t) {
    for (h, wg) in c.iter_mut().zip(w) {
        // Safety: the caller's.
        unsafe {
            h[0] = vpadalq_s16(h[0], vmull_s8(vget_low_s8(*wg), vget_low_s8(d)));
            h[1] = vpadalq_s16(h[1], vmull_high_s8(*wg, d));
        }
    }
}

/// Adds two quads' products: `smull` + `smlal` sum them in i16 before one `sadalp`. Exact
/// only when no weight is −128 (|2·127·128| < 2^15).
///
/// # Safety
/// NEON.
#[inline(always)]
unsafe fn mull_two(
    c: &mut [[int32x4_t; 2]; 4],
    w0: &[int8x16_t; 4],
    w1: &[int8x16_t; 4],
    d0: int8x16_t,
    d1: int8x16_t,
) {
    for ((h, a), b) in c.iter_mut().zip(w0).zip(w1) {
        // Safety: the caller's.
        unsafe {
            let lo = vmlal_s8(
                vmull_s8(vget_low_s8(*a), vget_low_s8(d0)),
                vget_low_s8(*b),
                vget_low_s8(d1),
            );
            let hi = vmlal_high_s8(vmull_high_s8(*a, d0), *b, d1);
            h[0] = vpadalq_s16(h[0], lo);
            h[1] = vpadalq_s16(h[1], hi);
        }
    }
}

/// `TileSums` with NEON's widening multiplies, two rows at a time (16 accumulators: each
/// weight register's products pairwise-added into two halves), two quads per `sadalp` when
/// the weights allow it (`QWeights::no_i8_min`).
fn mull_sums(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]) {
    let SumsIn {
        a, w, q0, q1, wsum, ..
    } = *t;
    let wp = t.panel();
    // Safety (every block): NEON is in the target's baseline; weight reads are quads
    // q0 .. q1 of panel p and activation reads lie in rows of 4·q1 bytes (`check`).
    let wq = |q: usize| unsafe { [0, 16, 32, 48].map(|o| vld1q_s8(wp.add(q * NR * 4 + o))) };
    for (pair, accs) in a.chunks(2).zip(acc.chunks_mut(2)) {
        let zero = unsafe { vdupq_n_s32(0) };
        let mut c = [[[zero; 2]; 4]; 2];
        let mut q = q0;
        while q < q1 {
            let av: [int8x16_t; 2] = core::array::from_fn(|r| unsafe {
                quads4(pair[r.min(pair.len() - 1)], q, q1, 0x80, true)
            });
            let n = (q1 - q).min(4);
            if n == 4 && w.no_i8_min {
                let (w0, w1, w2, w3) = (wq(q), wq(q + 1), wq(q + 2), wq(q + 3));
                for (ci, &ar) in c.iter_mut().zip(&av).take(pair.len()) {
                    unsafe {
                        mull_two(ci, &w0, &w1, dup_quad::<0>(ar), dup_quad::<1>(ar));
                        mull_two(ci, &w2, &w3, dup_quad::<2>(ar), dup_quad::<3>(ar));
                    }
                }
            } else {
                for l in 0..n {
                    let wl = wq(q + l);
                    for (ci, &ar) in c.iter_mut().zip(&av).take(pair.len()) {
                        unsafe {
                            let d = match l {
                                0 => dup_quad::<0>(ar),
                                1 => dup_quad::<1>(ar),
                                2 => dup_quad::<2>(ar),
                                _ => dup_quad::<3>(ar),
                            };
                            mull_one(ci, &wl, d);
                        }
                    }
                }
            }
            q += 4;
        }
        for (ci, acc) in c.iter().zip(accs.iter_mut()).take(pair.len()) {
            // [c0 (k0+k1), c0 (k2+k3), c1 …] and the same for c2, c3 → [c0, c1, c2, c3].
            let v = ci.map(|h| unsafe { vpaddq_s32(h[0], h[1]) });
            // Safety: NEON.
            unsafe { finish(&v, wsum, true, acc) };
        }
    }
}

/// `super::requant` of `s[jj] + bias[jj]` with `scale[jj]` for the 16 channels of a panel, in
/// NEON registers: the same operations in the same order (convert, multiply, the clamps with
/// `fminnm`/`fmaxnm`, which like `f32::min`/`max` return the number when one side is NaN, the
/// rounding add), so the results are those of the scalar function bit for bit.
#[inline(always)]
pub(super) fn requant16(
    s: &[i32; NR],
    bias: &[i32; NR],
    scale: &[f32; NR],
    zp: i32,
    qmin: i32,
    qmax: i32,
) -> [i8; NR] {
    const LIMIT: f32 = 4_194_304.0;
    const MAGIC: f32 = 12_582_912.0;
    let mut out = [0i8; NR];
    // Safety: NEON (baseline on this target); every pointer is to 16 elements of the arrays
    // above, read or written 4 (or 16 bytes) at a time inside them.
    unsafe {
        let (hi, lo) = (
            vdupq_n_f32((qmax - zp) as f32),
            vdupq_n_f32((qmin - zp) as f32),
        );
        let (lim, nlim, magic) = (vdupq_n_f32(LIMIT), vdupq_n_f32(-LIMIT), vdupq_n_f32(MAGIC));
        let mbits = vdupq_n_s32(MAGIC.to_bits() as i32);
        let (zpv, qlo, qhi) = (vdupq_n_s32(zp), vdupq_n_s32(qmin), vdupq_n_s32(qmax));
        let q: [int16x4_t; 4] = core::array::from_fn(|g| {
            let acc = vaddq_s32(
                vld1q_s32(s.as_ptr().add(4 * g)),
                vld1q_s32(bias.as_ptr().add(4 * g)),
            );
            let f = vmulq_f32(vcvtq_f32_s32(acc), vld1q_f32(scale.as_ptr().add(4 * g)));
            let f = vmaxnmq_f32(vminnmq_f32(f, hi), lo);
            let f = vminnmq_f32(vmaxnmq_f32(f, nlim), lim);
            let r = vsubq_s32(vreinterpretq_s32_f32(vaddq_f32(f, magic)), mbits);
            vmovn_s32(vminq_s32(vmaxq_s32(vaddq_s32(r, zpv), qlo), qhi))
        });
        let lo8 = vmovn_s16(vcombine_s16(q[0], q[1]));
        let hi8 = vmovn_s16(vcombine_s16(q[2], q[3]));
        vst1q_s8(out.as_mut_ptr(), vcombine_s8(lo8, hi8));
    }
    out
}
