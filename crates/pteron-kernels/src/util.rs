//! Helpers shared by the kernels: broadcasting, contiguity checks, index arithmetic.
//! (Append new shared helpers at the end of this file.)

use pteron_core::{Dims, KernelError, ScalarType, TensorInfo};

/// PyTorch broadcasting of two shapes (aligned from the right; 1 stretches).
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Dims, KernelError> {
    let rank = a.len().max(b.len());
    let mut out = [0usize; pteron_core::MAX_RANK];
    if rank > pteron_core::MAX_RANK {
        return Err(KernelError::RankTooLarge { rank });
    }
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = if da == db {
            da
        } else if da == 1 {
            db
        } else if db == 1 {
            da
        } else {
            return Err(KernelError::shape(format!(
                "cannot broadcast {a:?} with {b:?}"
            )));
        };
    }
    Dims::from_slice(&out[..rank])
}

/// Strides (in elements) to read a contiguous tensor of shape `src` as if it had the broadcast
/// shape `out`: 0 where the dim is stretched or missing. An error when `src` has more dims than
/// `out` or `out` more than [`pteron_core::MAX_RANK`].
pub fn broadcast_strides(src: &[usize], out: &[usize]) -> Result<Dims, KernelError> {
    let mut strides = Dims::from_slice(out)?;
    let off = out
        .len()
        .checked_sub(src.len())
        .ok_or_else(|| KernelError::shape(format!("cannot broadcast {src:?} to {out:?}")))?;
    let mut stride = 1usize;
    for i in (0..out.len()).rev() {
        if i < off {
            strides.as_mut_slice()[i] = 0;
        } else {
            let s = src[i - off];
            strides.as_mut_slice()[i] = if s == 1 && out[i] != 1 { 0 } else { stride };
            stride *= s.max(1);
        }
    }
    Ok(strides)
}

/// Errors unless every tensor has the default (contiguous) dim order.
pub fn require_contiguous(op: &'static str, tensors: &[&TensorInfo]) -> Result<(), KernelError> {
    for t in tensors {
        if !t.is_contiguous() {
            return Err(KernelError::unsupported(format!(
                "{op}: non-default dim order {:?} is not supported yet",
                t.dim_order()
            )));
        }
    }
    Ok(())
}

/// Errors unless every named tensor (`(what, tensor)`) has rank `rank`; the first that does
/// not is reported.
pub fn require_rank(
    op: &'static str,
    rank: usize,
    tensors: &[(&'static str, &TensorInfo)],
) -> Result<(), KernelError> {
    for &(what, t) in tensors {
        if t.rank() != rank {
            return Err(KernelError::rank_mismatch(op, what, rank, t.rank()));
        }
    }
    Ok(())
}

/// Errors unless `dtype` is one of `allowed`.
pub fn require_dtype(
    op: &'static str,
    dtype: ScalarType,
    allowed: &[ScalarType],
) -> Result<(), KernelError> {
    if allowed.contains(&dtype) {
        Ok(())
    } else {
        Err(KernelError::dtype(dtype, op))
    }
}

/// Errors unless `a` and `b` have the same dtype.
pub fn require_same_dtype(
    op: &'static str,
    a: ScalarType,
    b: ScalarType,
) -> Result<(), KernelError> {
    if a == b {
        Ok(())
    } else {
        Err(KernelError::dtype_mismatch(op, "second operand", a, b))
    }
}

pub const FLOATS: [ScalarType; 4] = [
    ScalarType::Float,
    ScalarType::Double,
    ScalarType::Half,
    ScalarType::BFloat16,
];
pub const REALS: [ScalarType; 9] = [
    ScalarType::Byte,
    ScalarType::Char,
    ScalarType::Short,
    ScalarType::Int,
    ScalarType::Long,
    ScalarType::Float,
    ScalarType::Double,
    ScalarType::Half,
    ScalarType::BFloat16,
];
pub const REALS_AND_BOOL: [ScalarType; 10] = ScalarType::REAL_AND_BOOL;

/// Splits a contiguous shape around `dim` into (outer, size, inner) element counts.
pub fn outer_dim_inner(sizes: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = sizes[..dim].iter().product();
    let inner = sizes[dim + 1..].iter().product();
    (outer, sizes[dim], inner)
}

/// Calls `f(out_linear_index, offsets)` for every element of a contiguous output of shape `out`,
/// where `offsets[k]` is the element offset into input `k` read with `strides[k]`.
pub fn for_each_strided<const K: usize>(
    out: &[usize],
    strides: [&[usize]; K],
    mut f: impl FnMut(usize, [usize; K]),
) {
    let rank = out.len();
    let numel: usize = out.iter().product();
    if numel == 0 {
        return;
    }
    let mut idx = [0usize; pteron_core::MAX_RANK];
    let mut off = [0usize; K];
    for lin in 0..numel {
        f(lin, off);
        // Increment the multi-index, updating offsets incrementally.
        let mut d = rank;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            for k in 0..K {
                off[k] += strides[k][d];
            }
            if idx[d] < out[d] {
                break;
            }
            for k in 0..K {
                off[k] -= strides[k][d] * out[d];
            }
            idx[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `copy_view` (which coalesces dims) against an element-by-element copy, over views with
    /// size-1 dims, mergeable and unmergeable dims, strided and negative steps, at every
    /// element size it specializes.
    #[test]
    fn copy_view_matches_elementwise() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for case in 0..400 {
            let elem = [1, 2, 4, 8, 3][case % 5];
            let rank = 1 + rnd(5);
            let sizes: Vec<usize> = (0..rank).map(|_| [1, 1, 2, 3, 5][rnd(5)]).collect();
            // Source: a contiguous buffer seen with each dim's stride scaled by 1 or 2, some
            // dims reversed (negative stride, offset at its far end).
            let mut src_st = vec![0isize; rank];
            let mut acc = 1isize;
            for d in (0..rank).rev() {
                let step = 1 + rnd(2) as isize;
                src_st[d] = acc * step;
                acc *= step * sizes[d] as isize;
            }
            let mut src_off = 0isize;
            for d in 0..rank {
                if rnd(4) == 0 {
                    src_off += src_st[d] * (sizes[d] as isize - 1);
                    src_st[d] = -src_st[d];
                }
            }
            // Destination: a permuted contiguous layout, at an offset.
            let mut order: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                order.swap(i, rnd(i + 1));
            }
            let mut dst_st = vec![0isize; rank];
            let mut acc2 = 1isize;
            for &d in order.iter().rev() {
                dst_st[d] = acc2;
                acc2 *= sizes[d] as isize;
            }
            let dst_off = rnd(3) as isize;
            let src: Vec<u8> = (0..acc as usize * elem)
                .map(|i| (i * 7 + 3) as u8)
                .collect();
            let len = (acc2 + dst_off) as usize * elem;
            let mut got = vec![0u8; len];
            copy_view(
                &src, src_off, &src_st, &mut got, dst_off, &dst_st, &sizes, elem,
            )
            .unwrap();
            let mut want = vec![0u8; len];
            let n: usize = sizes.iter().product();
            for flat in 0..n {
                let (mut r, mut so, mut dof) = (flat, src_off, dst_off);
                for d in (0..rank).rev() {
                    let i = (r % sizes[d]) as isize;
                    r /= sizes[d];
                    so += i * src_st[d];
                    dof += i * dst_st[d];
                }
                let (so, dof) = (so as usize * elem, dof as usize * elem);
                want[dof..dof + elem].copy_from_slice(&src[so..so + elem]);
            }
            assert_eq!(
                got, want,
                "sizes {sizes:?} src {src_st:?} dst {dst_st:?} elem {elem}"
            );
        }
    }

    #[test]
    fn broadcasting() {
        assert_eq!(
            broadcast_shapes(&[2, 1, 3], &[4, 1]).unwrap().as_slice(),
            &[2, 4, 3]
        );
        assert_eq!(broadcast_shapes(&[], &[3]).unwrap().as_slice(), &[3]);
        assert!(broadcast_shapes(&[2], &[3]).is_err());
        assert_eq!(
            broadcast_strides(&[4, 1], &[2, 4, 3]).unwrap().as_slice(),
            &[0, 1, 0]
        );
    }

    #[test]
    fn strided_walk() {
        let out = [2, 3];
        let sa = broadcast_strides(&[3], &out).unwrap();
        let sb = broadcast_strides(&[2, 1], &out).unwrap();
        let mut seen = vec![];
        for_each_strided(&out, [&sa, &sb], |lin, [a, b]| seen.push((lin, a, b)));
        assert_eq!(
            seen,
            vec![
                (0, 0, 0),
                (1, 1, 0),
                (2, 2, 0),
                (3, 0, 1),
                (4, 1, 1),
                (5, 2, 1)
            ]
        );
    }
}

// ---- Accumulation types (linalg, conv, norm, pool) ----

/// Arithmetic of an accumulation type: f32 (for f32, f16, bf16), f64, or i64 (wrapping, for
/// integer types; truncating back to the element type then equals wrapping arithmetic in it).
pub trait AccNum: Copy + Default + PartialOrd + core::fmt::Debug + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

/// Floating accumulation types (f32, f64), with the few libm functions kernels need.
pub trait AccFloat: AccNum + core::ops::Div<Output = Self> + core::ops::Neg<Output = Self> {
    const NEG_INFINITY: Self;
    fn sqrt(self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! acc_float {
    ($t:ty) => {
        impl AccNum for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
        impl AccFloat for $t {
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn sqrt(self) -> Self {
                crate::math::Libm::sqrt(self)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
acc_float!(f32);
acc_float!(f64);

impl AccNum for i64 {
    const ZERO: Self = 0;
    const ONE: Self = 1;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self.wrapping_mul(o)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as i64
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
}

/// An element type with its accumulation type. `as_acc`/`as_acc_mut` give the slice itself
/// when the element type is its own accumulation type (f32, f64, i64), so kernels can skip
/// conversion buffers.
pub trait Acc: pteron_core::Element {
    type A: AccNum;
    fn to_acc(self) -> Self::A;
    fn from_acc(a: Self::A) -> Self;
    fn as_acc(_s: &[Self]) -> Option<&[Self::A]> {
        None
    }
    fn as_acc_mut(_s: &mut [Self]) -> Option<&mut [Self::A]> {
        None
    }
}

macro_rules! acc_self {
    ($t:ty) => {
        impl Acc for $t {
            type A = $t;
            #[inline(always)]
            fn to_acc(self) -> $t {
                self
            }
            #[inline(always)]
            fn from_acc(a: $t) -> Self {
                a
            }
            fn as_acc(s: &[Self]) -> Option<&[$t]> {
                Some(s)
            }
            fn as_acc_mut(s: &mut [Self]) -> Option<&mut [$t]> {
                Some(s)
            }
        }
    };
}
acc_self!(f32);
acc_self!(f64);
acc_self!(i64);

macro_rules! acc_half {
    ($t:ty) => {
        impl Acc for $t {
            type A = f32;
            #[inline(always)]
            fn to_acc(self) -> f32 {
                self.to_f32()
            }
            #[inline(always)]
            fn from_acc(a: f32) -> Self {
                <$t>::from_f32(a)
            }
        }
    };
}
acc_half!(half::f16);
acc_half!(half::bf16);

macro_rules! acc_int {
    ($t:ty) => {
        impl Acc for $t {
            type A = i64;
            #[inline(always)]
            fn to_acc(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn from_acc(a: i64) -> Self {
                a as $t
            }
        }
    };
}
acc_int!(u8);
acc_int!(i8);
acc_int!(i16);
acc_int!(i32);

/// Reads an `int[]` argument into a fixed buffer of at most [`pteron_core::MAX_RANK`] items.
pub fn read_int_list<'p>(
    ctx: &impl pteron_core::ArgAccess<'p>,
    i: usize,
) -> Result<([i64; pteron_core::MAX_RANK], usize), KernelError> {
    let l = ctx.int_list(i)?;
    let mut buf = [0i64; pteron_core::MAX_RANK];
    let n = l.read_into(&mut buf)?.len();
    Ok((buf, n))
}

/// Copies the elements of a strided view of `src` (element size `elem`) into the contiguous
/// `dst`. `offset` and `strides` are in elements and may be negative; every element the view
/// touches is bounds-checked up front, so a bad view is an error, never an out-of-bounds read.
pub fn strided_copy(
    src: &[u8],
    elem: usize,
    offset: isize,
    sizes: &[usize],
    strides: &[isize],
    dst: &mut [u8],
) -> Result<(), KernelError> {
    let dst_st = contiguous_strides(sizes);
    let mut d = [0isize; pteron_core::MAX_RANK];
    for (o, &s) in d.iter_mut().zip(dst_st.iter()) {
        *o = s as isize;
    }
    copy_view(src, offset, strides, dst, 0, &d[..sizes.len()], sizes, elem)
}

/// The lowest and highest element offsets a view touches (`None` when it is empty).
fn view_span(offset: isize, sizes: &[usize], strides: &[isize]) -> Option<(i128, i128)> {
    if sizes.contains(&0) {
        return None;
    }
    let (mut lo, mut hi) = (offset as i128, offset as i128);
    for (&s, &st) in sizes.iter().zip(strides) {
        let span = (s as i128 - 1) * st as i128;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    Some((lo, hi))
}

/// Copies a strided view of `src` onto a strided view of `dst`, both of shape `sizes`
/// (offsets and strides in elements of size `elem`). Both views are bounds-checked up front.
#[allow(clippy::too_many_arguments)]
pub fn copy_view(
    src: &[u8],
    src_off: isize,
    src_st: &[isize],
    dst: &mut [u8],
    dst_off: isize,
    dst_st: &[isize],
    sizes: &[usize],
    elem: usize,
) -> Result<(), KernelError> {
    let rank = sizes.len();
    if src_st.len() != rank || dst_st.len() != rank {
        return Err(KernelError::invalid(
            "copy_view: stride ranks differ from the shape",
        ));
    }
    let Some((slo, shi)) = view_span(src_off, sizes, src_st) else {
        return Ok(());
    };
    let (dlo, dhi) = view_span(dst_off, sizes, dst_st).expect("same sizes");
    if slo < 0 || (shi + 1) * elem as i128 > src.len() as i128 {
        return Err(KernelError::invalid(format!(
            "strided view (offset {src_off}, sizes {sizes:?}, strides {src_st:?}) reads outside its source"
        )));
    }
    if dlo < 0 || (dhi + 1) * elem as i128 > dst.len() as i128 {
        return Err(KernelError::invalid(
            "strided copy: destination view out of range",
        ));
    }
    // Coalesced: a view that moves through memory like a flat run (an unsqueeze, a slice of
    // whole rows, one input of a cat along a late dim) becomes one long inner run, not a
    // million one-element copies.
    let c = Coalesced::new(sizes, src_st, dst_st);
    let rank = c.rank;
    let (sizes, src_st, dst_st) = (&c.sizes[..rank], &c.src[..rank], &c.dst[..rank]);
    // Inner run: the last dim, copied as one block when both strides are 1.
    let (inner, s_in, d_in) = if rank == 0 {
        (1, 1, 1)
    } else {
        (sizes[rank - 1], src_st[rank - 1], dst_st[rank - 1])
    };
    let outer_rank = rank.saturating_sub(1);
    let mut idx = [0usize; pteron_core::MAX_RANK];
    let (mut sb, mut db) = (src_off, dst_off);
    loop {
        if s_in == 1 && d_in == 1 {
            let (s, d) = (sb as usize * elem, db as usize * elem);
            dst[d..d + inner * elem].copy_from_slice(&src[s..s + inner * elem]);
        } else {
            // A literal element size per arm: inlined, each copy is one load and one store.
            match elem {
                1 => strided_run(1, src, sb, s_in, dst, db, d_in, inner),
                2 => strided_run(2, src, sb, s_in, dst, db, d_in, inner),
                4 => strided_run(4, src, sb, s_in, dst, db, d_in, inner),
                8 => strided_run(8, src, sb, s_in, dst, db, d_in, inner),
                e => strided_run(e, src, sb, s_in, dst, db, d_in, inner),
            }
        }
        // Advance the outer multi-index.
        let mut d = outer_rank;
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            idx[d] += 1;
            sb = sb.wrapping_add(src_st[d]);
            db = db.wrapping_add(dst_st[d]);
            if idx[d] < sizes[d] {
                break;
            }
            sb = sb.wrapping_sub(src_st[d].wrapping_mul(sizes[d] as isize));
            db = db.wrapping_sub(dst_st[d].wrapping_mul(sizes[d] as isize));
            idx[d] = 0;
        }
    }
}

/// `n` elements of `e` bytes from element `s` (step `s_in`) of `src` to element `d` (step
/// `d_in`) of `dst`; the caller checked that every one lies inside its slice.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn strided_run(
    e: usize,
    src: &[u8],
    s: isize,
    s_in: isize,
    dst: &mut [u8],
    d: isize,
    d_in: isize,
    n: usize,
) {
    let (mut sp, mut dp) = (s, d);
    for _ in 0..n {
        let (s, d) = (sp as usize * e, dp as usize * e);
        dst[d..d + e].copy_from_slice(&src[s..s + e]);
        sp = sp.wrapping_add(s_in);
        dp = dp.wrapping_add(d_in);
    }
}

/// A copy's shape with size-1 dims dropped and each dim merged into the one outside it
/// when both views step over it as over one longer dim (`st[d] = st[d+1] · size[d+1]` in the
/// source and the destination). Visits the same elements in the same order; no size is 0.
struct Coalesced {
    rank: usize,
    sizes: [usize; pteron_core::MAX_RANK],
    src: [isize; pteron_core::MAX_RANK],
    dst: [isize; pteron_core::MAX_RANK],
}

impl Coalesced {
    fn new(sizes: &[usize], src: &[isize], dst: &[isize]) -> Self {
        let mut c = Coalesced {
            rank: 0,
            sizes: [0; pteron_core::MAX_RANK],
            src: [0; pteron_core::MAX_RANK],
            dst: [0; pteron_core::MAX_RANK],
        };
        for d in 0..sizes.len() {
            if sizes[d] == 1 {
                continue;
            }
            if c.rank > 0 {
                let i = c.rank - 1;
                // The dim before (outer) merges with this one (inner) when it steps exactly
                // over a whole run of it, in both views.
                let (n, ss, ds) = (sizes[d] as isize, src[d], dst[d]);
                if c.src[i] == ss.wrapping_mul(n) && c.dst[i] == ds.wrapping_mul(n) {
                    c.sizes[i] *= sizes[d];
                    c.src[i] = ss;
                    c.dst[i] = ds;
                    continue;
                }
            }
            c.sizes[c.rank] = sizes[d];
            c.src[c.rank] = src[d];
            c.dst[c.rank] = dst[d];
            c.rank += 1;
        }
        c
    }
}

/// Contiguous strides (in elements) of `sizes`, as `isize`.
pub fn contiguous_strides(sizes: &[usize]) -> Dims {
    let mut st = Dims::from_slice(sizes).expect("rank checked by caller");
    let mut s = 1usize;
    for i in (0..sizes.len()).rev() {
        st.as_mut_slice()[i] = s;
        s *= sizes[i].max(1);
    }
    st
}

/// Like [`copy_view`] over typed slices, converting every element from `S` to `D` as C++
/// `static_cast` does (`elementwise::engine::comp::cast`). Both views are bounds-checked up
/// front.
pub fn copy_view_cast<S: pteron_core::Element, D: pteron_core::Element>(
    src: &[S],
    src_off: isize,
    src_st: &[isize],
    dst: &mut [D],
    dst_off: isize,
    dst_st: &[isize],
    sizes: &[usize],
) -> Result<(), KernelError> {
    let rank = sizes.len();
    if src_st.len() != rank || dst_st.len() != rank {
        return Err(KernelError::invalid(
            "copy_view_cast: stride ranks differ from the shape",
        ));
    }
    let Some((slo, shi)) = view_span(src_off, sizes, src_st) else {
        return Ok(());
    };
    let (dlo, dhi) = view_span(dst_off, sizes, dst_st).expect("same sizes");
    if slo < 0 || shi >= src.len() as i128 || dlo < 0 || dhi >= dst.len() as i128 {
        return Err(KernelError::invalid(
            "strided copy: a view reaches outside its tensor",
        ));
    }
    let mut idx = [0usize; pteron_core::MAX_RANK];
    let (mut s, mut d) = (src_off, dst_off);
    loop {
        dst[d as usize] = crate::elementwise::engine::comp::cast::<S, D>(src[s as usize]);
        let mut k = rank;
        loop {
            if k == 0 {
                return Ok(());
            }
            k -= 1;
            idx[k] += 1;
            s += src_st[k];
            d += dst_st[k];
            if idx[k] < sizes[k] {
                break;
            }
            s -= src_st[k] * sizes[k] as isize;
            d -= dst_st[k] * sizes[k] as isize;
            idx[k] = 0;
        }
    }
}

/// The element strides of `t` (from its dim order) as `isize`.
pub fn istrides(t: &TensorInfo) -> [isize; pteron_core::MAX_RANK] {
    let mut st = [0isize; pteron_core::MAX_RANK];
    for (o, &s) in st.iter_mut().zip(t.strides()) {
        *o = s as isize;
    }
    st
}
