//! Fixed-point requantization as CMSIS-NN's `arm_nn_requantize` does it, in the form the
//! Cortex-M backend's reference states (`requantize_cmsis`): `x · 2^max(shift, 0)`, times the
//! Q31 `multiplier` with rounding (`(v · m + 2^30) >> 31`), then a rounding right shift by
//! `max(-shift, 0)` whose ties go away from zero. 64-bit intermediate, wrapping as the
//! reference's int64 tensors wrap; the result is truncated to `i32` as the reference casts.

/// `requantize_cmsis(x, multiplier, shift)`.
#[inline]
pub fn requantize(x: i32, multiplier: i32, shift: i32) -> i32 {
    let left = shift.clamp(0, 63) as u32;
    let right = (-shift).clamp(0, 63) as u32;
    let value = i64::from(x).wrapping_shl(left);
    let mut result = value
        .wrapping_mul(i64::from(multiplier))
        .wrapping_add(1 << 30)
        >> 31;
    if right > 0 {
        let mask = (1i64 << right) - 1;
        let remainder = result & mask;
        result >>= right;
        let threshold = (mask >> 1) + i64::from(result < 0);
        if remainder > threshold {
            result += 1;
        }
    }
    result as i32
}

/// The last step of every operator: `requantized + offset`, clamped to `[min, max]`, as `i8`.
#[inline]
pub fn to_i8(requantized: i32, offset: i32, min: i32, max: i32) -> i8 {
    // max-then-min, as torch.clamp: bounds a hostile program inverted cannot panic.
    requantized
        .wrapping_add(offset)
        .max(min)
        .min(max)
        .clamp(-128, 127) as i8
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's formula in exact arithmetic: `round(x · m · 2^shift / 2^31)` where
    /// the two roundings (after the Q31 product, then after the right shift) are done as
    /// CMSIS-NN does them.
    fn slow(x: i32, m: i32, shift: i32) -> i32 {
        let v = (x as i128) << shift.max(0);
        let p = (v * m as i128 + (1 << 30)) >> 31;
        let r = (-shift).max(0);
        if r == 0 {
            return p as i32;
        }
        let q = p >> r;
        let rem = p - (q << r);
        let half = (1i128 << (r - 1)) - 1 + i128::from(q < 0);
        (q + i128::from(rem > half)) as i32
    }

    #[test]
    fn matches_the_formula() {
        let ms = [1 << 30, 1_518_500_250, 2_147_483_647, 1_073_741_824 + 12345];
        for &m in &ms {
            for shift in -12..=3 {
                for x in [
                    -40_000, -1025, -513, -512, -511, -7, -1, 0, 1, 7, 511, 512, 513, 99_999,
                ] {
                    assert_eq!(
                        requantize(x, m, shift),
                        slow(x, m, shift),
                        "x {x} m {m} shift {shift}"
                    );
                }
            }
        }
    }

    #[test]
    fn halves_and_offsets() {
        // m = 2^30 is one half: x / 2 before the right shift.
        assert_eq!(requantize(6, 1 << 30, 0), 3);
        // 5 · ½ = 2.5 rounds up to 3 in the Q31 step, then 3 / 2 = 1.5 rounds away from zero:
        // 2 (CMSIS-NN rounds twice; the exact 1.25 would give 1).
        assert_eq!(requantize(5, 1 << 30, -1), 2);
        assert_eq!(requantize(-5, 1 << 30, -1), -1); // -2.5 rounds up to -2, then -2 / 2
        assert_eq!(requantize(-3, 1 << 30, 0), -1);
        assert_eq!(to_i8(200, 0, -128, 127), 127);
        assert_eq!(to_i8(-3, -126, -128, 127), -128);
        assert_eq!(to_i8(10, 5, 0, 12), 12);
    }

    /// Bounds as torch.clamp takes them, inverted ones included (the upper wins), no panic.
    #[test]
    fn to_i8_clamps_as_torch() {
        assert_eq!(to_i8(5, 0, -128, 127), 5);
        assert_eq!(to_i8(100, 50, -128, 127), 127);
        assert_eq!(to_i8(5, 0, 10, -10), -10);
        assert_eq!(to_i8(i32::MAX, 1, i32::MIN, i32::MAX), -128);
    }
}
