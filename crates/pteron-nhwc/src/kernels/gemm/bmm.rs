//! Batched matrix products with broadcast batch dims.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::gemm::{gemm, Epilogue, MatA, MatB};
use pteron_kernels_cpu::par::for_chunks_mut;

use super::gerr;

/// `out[batch] = a[batch] · b[batch]` with broadcast batch dims: `a: [.., m, k]`,
/// `b: [.., k, n]` (or `[.., n, k]` when `transpose_b`). `a_batch`/`b_batch` map an output
/// batch index to the operands' batch indices.
#[allow(clippy::too_many_arguments)]
pub fn bmm(
    par: &dyn Parallel,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    batches: usize,
    batch_index: &(dyn Fn(usize) -> (usize, usize) + Sync),
    m: usize,
    k: usize,
    n: usize,
    transpose_b: bool,
) -> Result<(), KernelError> {
    let product = |i: usize, od: &mut [f32], par: &dyn Parallel| -> Result<(), KernelError> {
        let (ia, ib) = batch_index(i);
        let ad = a
            .get(ia * m * k..(ia + 1) * m * k)
            .ok_or_else(|| KernelError::invalid("bmm: a too short"))?;
        let bd = b
            .get(ib * k * n..(ib + 1) * k * n)
            .ok_or_else(|| KernelError::invalid("bmm: b too short"))?;
        let mb = if transpose_b {
            MatB::Cols { data: bd, ldb: k }
        } else {
            MatB::Rows { data: bd, ldb: n }
        };
        gemm(
            par,
            m,
            n,
            k,
            MatA::Rows { data: ad, lda: k },
            mb,
            od,
            n,
            &Epilogue::default(),
        )
        .map_err(gerr)
    };
    let per = m * n;
    let out = out
        .get_mut(..batches * per)
        .ok_or_else(|| KernelError::invalid("bmm: output too short"))?;
    if per == 0 {
        return Ok(());
    }
    // Many small products (attention heads: 12 of 128×32·32×128): one per task, each on one
    // thread, rather than each split over the threads.
    if batches >= 2 * par.num_threads() && per * k < 1 << 21 {
        let failed = std::sync::Mutex::new(None);
        for_chunks_mut(par, out, per, 1, &|i, od| {
            if let Err(e) = product(i, od, &pteron_core::INLINE) {
                if let Ok(mut f) = failed.lock() {
                    f.get_or_insert(e);
                }
            }
        });
        return match failed.into_inner() {
            Ok(Some(e)) => Err(e),
            _ => Ok(()),
        };
    }
    for (i, od) in out.chunks_exact_mut(per).enumerate() {
        product(i, od, par)?;
    }
    Ok(())
}
