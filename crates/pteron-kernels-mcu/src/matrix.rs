//! The Cortex-M backend's layout and matrix operators, as its reference computes them:
//!
//! - `cortex_m::transpose.out`: `input.permute(perm)`, written in the output's own dim order.
//! - `cortex_m::quantized_batch_matmul.out`: `lhs [B, M, K]` times `rhs_transposed [B, N, K]`
//!   transposed, each operand plus its offset (the negated zero point, CMSIS-NN's
//!   convention), accumulated exactly in `i32` (the reference's float32 `bmm` of integers is
//!   exact while `K · 255² < 2^24`, i.e. K ≤ 258), requantized (`requantize_cmsis`), plus the
//!   output zero point, clamped to int8.
//! - `cortex_m::softmax.out`: the reference's float path: inputs `(q − zp) · scale` with the
//!   scale the exporter encoded as multiplier and shift (`m · 2^shift / 2^31 / 2^(31 − 5)`),
//!   `softmax` along `dim` in float32 (max subtracted, `expf`, sum in order), quantized to
//!   CMSIS-NN's output (`round_half_even(p · 256) − 128`). Its float sums may differ from
//!   PyTorch's vectorized ones in the last bit, which can move a result by one step where the
//!   value sits on a rounding boundary.
//! - `cortex_m::quantized_div.out`: `(a − zp_a) / (b − zp_b)` in float32 (0 where the divisor
//!   is 0), times the exporter's float scale, `round_half_even`, plus the output zero point,
//!   clamped to int8; operands of one shape.

use pteron_core::{
    register_op, ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    OpSelection, ScalarType, TensorInfo, MAX_RANK,
};

use crate::args::int32;
use crate::quant::round_half_even;
use crate::requant::{requantize, to_i8};

pub fn register<S: OpSelection>(r: &mut KernelRegistry) {
    let int8 = DtypeSet::of(&[ScalarType::Char]);
    register_op!(
        S,
        r,
        "cortex_m::transpose.out",
        Kernel::with_check(transpose_out, check_transpose).dtypes(int8)
    );
    register_op!(
        S,
        r,
        "cortex_m::quantized_batch_matmul.out",
        Kernel::with_check(batch_matmul_out, check_batch_matmul).dtypes(int8)
    );
    register_op!(
        S,
        r,
        "cortex_m::softmax.out",
        Kernel::with_check(softmax_out, check_softmax).dtypes(int8)
    );
    register_op!(
        S,
        r,
        "cortex_m::quantized_div.out",
        Kernel::with_check(div_out, check_div).dtypes(int8)
    );
}

fn int8(t: &TensorInfo, op: &'static str) -> Result<(), KernelError> {
    if t.dtype() != ScalarType::Char {
        return Err(KernelError::dtype(t.dtype(), op));
    }
    Ok(())
}

// ---- transpose: [input, perm, out] ----

const TRANSPOSE: &str = "cortex_m transpose";

/// For each output dim, the input dim it reads, checked to be a permutation matching shapes.
fn permutation<'p>(a: &impl ArgAccess<'p>) -> Result<([usize; MAX_RANK], usize), KernelError> {
    let (x, o) = (a.tensor(0)?, a.tensor(2)?);
    int8(x, TRANSPOSE)?;
    int8(o, TRANSPOSE)?;
    let l = a.int_list(1)?;
    let rank = x.rank();
    if l.len() != rank || o.rank() != rank {
        return Err(KernelError::shape(
            "cortex_m transpose: perm and ranks differ",
        ));
    }
    let mut perm = [0usize; MAX_RANK];
    let mut seen = [false; MAX_RANK];
    for (k, p) in perm.iter_mut().enumerate().take(rank) {
        let d = l.get(k)?;
        let d = usize::try_from(d)
            .ok()
            .filter(|&d| d < rank && !seen[d])
            .ok_or_else(|| KernelError::invalid("cortex_m transpose: perm is not a permutation"))?;
        seen[d] = true;
        if o.size(k) != x.size(d) {
            return Err(KernelError::shape("cortex_m transpose: output shape"));
        }
        *p = d;
    }
    Ok((perm, rank))
}

fn check_transpose(a: &ArgView) -> Result<(), KernelError> {
    permutation(a).map(|_| ())
}

fn transpose_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (perm, rank) = permutation(ctx)?;
    let (x_strides, o_info) = {
        let x = ctx.tensor(0)?;
        let mut s = [0usize; MAX_RANK];
        s[..rank].copy_from_slice(x.strides());
        (s, *ctx.tensor(2)?)
    };
    let ([x], [mut o]) = ctx.io([0], [2])?;
    let (x, out) = (x.as_slice::<i8>()?, o.as_mut_slice::<i8>()?);
    // Walk the output's logical indices; each element's input offset follows the perm.
    let sizes = o_info.sizes();
    let o_strides = o_info.strides();
    let mut index = [0usize; MAX_RANK];
    for _ in 0..o_info.numel() {
        let (mut xo, mut oo) = (0, 0);
        for k in 0..rank {
            xo += index[k] * x_strides[perm[k]];
            oo += index[k] * o_strides[k];
        }
        out[oo] = x[xo];
        for k in (0..rank).rev() {
            index[k] += 1;
            if index[k] < sizes[k] {
                break;
            }
            index[k] = 0;
        }
    }
    Ok(())
}

// ---- quantized_batch_matmul: [lhs, lhs_offset, rhs_transposed, rhs_offset, out_zp,
//      multiplier, shift, scratch, out] ----

const BMM: &str = "cortex_m quantized_batch_matmul";

/// `[batch, rows, cols, inner]` and the integer parameters.
#[derive(Clone, Copy, Debug)]
pub struct BatchMatmul {
    pub dims: [usize; 4],
    pub lhs_offset: i32,
    pub rhs_offset: i32,
    pub out_zero_point: i32,
    pub multiplier: i32,
    pub shift: i32,
}

fn bmm_params<'p>(a: &impl ArgAccess<'p>) -> Result<BatchMatmul, KernelError> {
    let (l, r, o) = (a.tensor(0)?, a.tensor(2)?, a.tensor(8)?);
    for t in [l, r, o] {
        int8(t, BMM)?;
        if t.rank() != 3 || !t.is_contiguous() {
            return Err(KernelError::unsupported(
                "cortex_m quantized_batch_matmul: contiguous 3-d tensors only",
            ));
        }
    }
    let (b, m, k, n) = (l.size(0), l.size(1), l.size(2), r.size(1));
    if r.size(0) != b || r.size(2) != k || o.sizes() != [b, m, n] {
        return Err(KernelError::shape(
            "cortex_m quantized_batch_matmul: shapes",
        ));
    }
    Ok(BatchMatmul {
        dims: [b, m, n, k],
        lhs_offset: int32(a, 1, BMM)?,
        rhs_offset: int32(a, 3, BMM)?,
        out_zero_point: int32(a, 4, BMM)?,
        multiplier: int32(a, 5, BMM)?,
        shift: int32(a, 6, BMM)?,
    })
}

fn check_batch_matmul(a: &ArgView) -> Result<(), KernelError> {
    bmm_params(a).map(|_| ())
}

fn batch_matmul_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let p = bmm_params(ctx)?;
    let ([l, r], [mut o]) = ctx.io([0, 2], [8])?;
    batch_matmul(&p, l.as_slice()?, r.as_slice()?, o.as_mut_slice()?);
    Ok(())
}

pub fn batch_matmul(p: &BatchMatmul, lhs: &[i8], rhs_t: &[i8], out: &mut [i8]) {
    let [b, m, n, k] = p.dims;
    for bi in 0..b {
        for i in 0..m {
            let row = &lhs[(bi * m + i) * k..][..k];
            for j in 0..n {
                let col = &rhs_t[(bi * n + j) * k..][..k];
                let acc = crate::dot(row, col, 0, p.lhs_offset, p.rhs_offset);
                let r = requantize(acc, p.multiplier, p.shift);
                out[(bi * m + i) * n + j] = to_i8(r, p.out_zero_point, -128, 127);
            }
        }
    }
}

// ---- softmax: [input, dim, input_zp, output_zp, multiplier, shift, diff_min, out] ----

const SOFTMAX: &str = "cortex_m softmax";

/// Softmax over the last dim of a contiguous tensor: `rows` rows of `len`.
#[derive(Clone, Copy, Debug)]
pub struct Softmax {
    pub rows: usize,
    pub len: usize,
    pub zero_point: i32,
    pub scale: f32,
}

fn softmax_params<'p>(a: &impl ArgAccess<'p>) -> Result<Softmax, KernelError> {
    let (x, o) = (a.tensor(0)?, a.tensor(7)?);
    int8(x, SOFTMAX)?;
    int8(o, SOFTMAX)?;
    if x.sizes() != o.sizes() || !x.is_contiguous() || !o.is_contiguous() || x.rank() == 0 {
        return Err(KernelError::unsupported(
            "cortex_m softmax: contiguous tensors of one shape",
        ));
    }
    let rank = x.rank() as i64;
    let dim = a.int(1)?;
    if dim != -1 && dim != rank - 1 {
        return Err(KernelError::unsupported(
            "cortex_m softmax: the last dim only",
        ));
    }
    if a.int(3)? != -128 {
        return Err(KernelError::invalid(
            "cortex_m softmax: output zero point must be -128",
        ));
    }
    let (m, shift) = (a.int(4)?, a.int(5)?);
    if !(1..=i64::from(i32::MAX)).contains(&m) || !(-31..=31).contains(&shift) {
        return Err(KernelError::invalid(
            "cortex_m softmax: multiplier or shift out of range",
        ));
    }
    // As the reference forms it, in double: m / 2^31 · 2^shift / 2^(31 − 5).
    let real = (m as f64 / 2_147_483_648.0) * libm::ldexp(1.0, shift as i32);
    let scale = real / (1u64 << 26) as f64;
    let len = x.size(x.rank() - 1);
    Ok(Softmax {
        rows: if len == 0 { 0 } else { x.numel() / len },
        len,
        zero_point: int32(a, 2, SOFTMAX)?,
        scale: scale as f32,
    })
}

fn check_softmax(a: &ArgView) -> Result<(), KernelError> {
    softmax_params(a).map(|_| ())
}

fn softmax_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let p = softmax_params(ctx)?;
    let ([x], [mut o]) = ctx.io([0], [7])?;
    softmax(&p, x.as_slice()?, o.as_mut_slice()?);
    Ok(())
}

pub fn softmax(p: &Softmax, x: &[i8], out: &mut [i8]) {
    let zp = p.zero_point as f32;
    let dq = |q: i8| (f32::from(q) - zp) * p.scale;
    for r in 0..p.rows {
        let row = &x[r * p.len..][..p.len];
        let max = row.iter().map(|&q| dq(q)).fold(f32::NEG_INFINITY, f32::max);
        // Two passes over the exponentials (recomputed, the same values): nothing allocated.
        let sum: f32 = row.iter().map(|&q| libm::expf(dq(q) - max)).sum();
        for (o, &q) in out[r * p.len..][..p.len].iter_mut().zip(row) {
            let v = libm::expf(dq(q) - max);
            let q = round_half_even(v / sum * 256.0) - 128.0;
            *o = q.clamp(-128.0, 127.0) as i8;
        }
    }
}

// ---- quantized_div: [self, self_zp, other, other_zp, out_zp, output_scale, out] ----

const DIV: &str = "cortex_m quantized_div";

fn div_params<'p>(a: &impl ArgAccess<'p>) -> Result<(i32, i32, i32, f32), KernelError> {
    let (x, y, o) = (a.tensor(0)?, a.tensor(2)?, a.tensor(6)?);
    for t in [x, y, o] {
        int8(t, DIV)?;
        if t.sizes() != o.sizes() || t.dim_order() != o.dim_order() {
            return Err(KernelError::unsupported(
                "cortex_m quantized_div: operands of the output's shape only",
            ));
        }
    }
    Ok((
        int32(a, 1, DIV)?,
        int32(a, 3, DIV)?,
        int32(a, 4, DIV)?,
        a.double(5)? as f32,
    ))
}

fn check_div(a: &ArgView) -> Result<(), KernelError> {
    div_params(a).map(|_| ())
}

fn div_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (za, zb, zo, scale) = div_params(ctx)?;
    let ([x, y], [mut o]) = ctx.io([0, 2], [6])?;
    let (x, y) = (x.as_slice::<i8>()?, y.as_slice::<i8>()?);
    for ((o, &a), &b) in o.as_mut_slice::<i8>()?.iter_mut().zip(x).zip(y) {
        let a = i32::from(a).wrapping_sub(za) as f32;
        let b = i32::from(b).wrapping_sub(zb) as f32;
        let q = if b != 0.0 { a / b } else { 0.0 };
        let r = round_half_even(q * scale) + zo as f32;
        *o = r.clamp(-128.0, 127.0) as i8;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The product against the formula: Σ (l + lo)(r + ro), requantized, offset, clamped.
    #[test]
    fn batch_matmul_matches_the_formula() {
        let lhs: [i8; 12] = [1, -2, 3, 127, -128, 0, 5, 6, -7, 8, 9, -10];
        let rhs_t: [i8; 12] = [-1, 2, 0, 4, 11, -12, 13, 14, 100, -100, 50, -50];
        let p = BatchMatmul {
            dims: [2, 2, 1, 3],
            lhs_offset: 4,
            rhs_offset: -3,
            out_zero_point: 7,
            multiplier: 1 << 30,
            shift: -4,
        };
        let mut out = [0i8; 4];
        batch_matmul(&p, &lhs, &rhs_t, &mut out);
        for b in 0..2 {
            for i in 0..2 {
                let acc: i32 = (0..3)
                    .map(|k| {
                        (i32::from(lhs[(b * 2 + i) * 3 + k]) + 4)
                            * (i32::from(rhs_t[b * 3 + k]) - 3)
                    })
                    .sum();
                let want = to_i8(requantize(acc, 1 << 30, -4), 7, -128, 127);
                assert_eq!(out[b * 2 + i], want);
            }
        }
    }

    /// A row of equal inputs spreads evenly: each 1/len, i.e. round(256/len) − 128.
    #[test]
    fn softmax_of_equal_inputs() {
        let p = Softmax {
            rows: 2,
            len: 5,
            zero_point: 3,
            scale: 0.1,
        };
        let mut out = [0i8; 10];
        softmax(&p, &[9; 10], &mut out);
        let want = ((256.0f32 / 5.0).round_ties_even() - 128.0) as i8;
        assert!(out.iter().all(|&v| v == want), "{out:?}");
    }
}
