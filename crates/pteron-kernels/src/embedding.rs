//! `aten::embedding.out`: row lookup in a 2-d weight table. Works on raw bytes (any weight
//! dtype); indices are int64 or int32 and are bounds-checked (an out-of-range id is an error).

use pteron_core::{
    ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry, ScalarType,
    TensorRef,
};

use crate::util::require_contiguous;

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::embedding.out",
        Kernel::with_check(embedding_out, check_embedding).dtypes(DtypeSet::ALL),
    );
}

fn check_embedding(a: &ArgView) -> Result<(), KernelError> {
    let (w, idx, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(5)?);
    if !matches!(idx.dtype(), ScalarType::Long | ScalarType::Int) {
        return Err(KernelError::dtype(idx.dtype(), "embedding indices"));
    }
    if w.dtype() != o.dtype() {
        return Err(KernelError::dtype(o.dtype(), "embedding output"));
    }
    if w.rank() != 2 {
        return Err(KernelError::unsupported(format!(
            "embedding: weight of rank {}",
            w.rank()
        )));
    }
    require_contiguous("embedding", &[w, idx, o])
}

/// An int64 or int32 index tensor, read in place (each index widened to i64 on access).
#[derive(Clone, Copy)]
pub enum Indices<'a> {
    Long(&'a [i64]),
    Int(&'a [i32]),
}

impl<'a> Indices<'a> {
    /// The indices of `t`, which must be int64 or int32.
    pub fn of(t: &TensorRef<'a>) -> Result<Self, KernelError> {
        match t.info.dtype() {
            ScalarType::Long => Ok(Indices::Long(t.as_slice::<i64>()?)),
            ScalarType::Int => Ok(Indices::Int(t.as_slice::<i32>()?)),
            dt => Err(KernelError::dtype(dt, "index tensor")),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Indices::Long(s) => s.len(),
            Indices::Int(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `k`-th index (panics when `k >= len()`, like slice indexing).
    #[inline]
    pub fn get(&self, k: usize) -> i64 {
        match self {
            Indices::Long(s) => s[k],
            Indices::Int(s) => s[k] as i64,
        }
    }
}

fn embedding_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (w, idx) = (*ctx.tensor(0)?, *ctx.tensor(1)?);
    require_contiguous("embedding", &[&w, &idx, ctx.tensor(5)?])?;
    if w.rank() != 2 {
        return Err(KernelError::unsupported(format!(
            "embedding: weight of rank {}",
            w.rank()
        )));
    }
    // padding_idx, scale_grad_by_freq and sparse only matter for the backward pass.
    let (rows, dim) = (w.size(0), w.size(1));
    let mut osz = idx.dims();
    osz.push(dim)?;
    ctx.resize(5, &osz)?;
    let ([wr, ir], [o]) = ctx.io([0, 1], [5])?;
    if wr.info.dtype() != o.info.dtype() {
        return Err(KernelError::dtype(o.info.dtype(), "embedding output"));
    }
    let row_bytes = dim * w.dtype().elem_size();
    let ids = Indices::of(&ir)?;
    for k in 0..ids.len() {
        let id = ids.get(k);
        let r =
            usize::try_from(id)
                .ok()
                .filter(|&r| r < rows)
                .ok_or(KernelError::IndexOutOfRange {
                    op: "embedding",
                    index: id,
                    size: rows,
                })?;
        o.bytes[k * row_bytes..(k + 1) * row_bytes]
            .copy_from_slice(&wr.bytes[r * row_bytes..(r + 1) * row_bytes]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::ScalarType as St;

    fn call(
        ids_i64: Option<&[i64]>,
        ids_i32: Option<&[i32]>,
        shape: &[usize],
    ) -> (TestCall, usize) {
        let mut c = TestCall::new();
        let w: Vec<f32> = (0..12).map(|v| v as f32).collect();
        c.tensor(&[4, 3], &w);
        match (ids_i64, ids_i32) {
            (Some(i), _) => c.tensor(shape, i),
            (_, Some(i)) => c.tensor(shape, i),
            _ => unreachable!(),
        };
        c.int(-1);
        c.bool(false);
        c.bool(false);
        // the output's rank is the indices' + 1, so that the resize succeeds
        let o = c.out(St::Float, &vec![1; shape.len() + 1]);
        c.ret(o);
        (c, o)
    }

    #[test]
    fn lookup_int64_and_int32() {
        let (mut c, o) = call(Some(&[3, 0, 1, 3]), None, &[2, 2]);
        c.check(check_embedding).unwrap();
        c.run(embedding_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[2, 2, 3]);
        assert_eq!(
            c.output::<f32>(o),
            vec![9., 10., 11., 0., 1., 2., 3., 4., 5., 9., 10., 11.]
        );

        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[1.0f32, 2., 3., 4.]);
        c.tensor(&[3], &[1i32, 1, 0]);
        c.int(0);
        c.bool(false);
        c.bool(false);
        let o = c.out(St::Float, &[3, 2]);
        c.ret(o);
        c.run(embedding_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![3., 4., 3., 4., 1., 2.]);
    }

    #[test]
    fn out_of_range_ids_are_errors() {
        for bad in [4i64, -1, i64::MIN] {
            let (mut c, _) = call(Some(&[0, bad]), None, &[2]);
            let r = c.run(embedding_out);
            assert!(
                matches!(r, Err(KernelError::IndexOutOfRange { index, size: 4, .. }) if index == bad),
                "id {bad}: {r:?}"
            );
        }
        let (c, _) = call(None, Some(&[0]), &[1]);
        c.check(check_embedding).unwrap();
    }

    #[test]
    fn float_indices_rejected_at_load() {
        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[1.0f32; 4]);
        c.tensor(&[1], &[0.0f32]);
        c.int(-1);
        c.bool(false);
        c.bool(false);
        let o = c.out(St::Float, &[1, 2]);
        c.ret(o);
        assert!(matches!(
            c.check(check_embedding),
            Err(KernelError::UnsupportedDType { .. })
        ));
    }
}
