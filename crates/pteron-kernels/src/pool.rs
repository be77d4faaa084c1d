//! 2-d pooling and resampling: `max_pool2d_with_indices`, `avg_pool2d`, adaptive average
//! pooling, nearest and bilinear upsampling. Inputs are `[N, C, H, W]` or `[C, H, W]` (upsampling:
//! 4-d), in any dim order (read and written through their strides: channels-last works), in the
//! dtypes ExecuTorch's portable kernels take:
//!
//! - max_pool2d_with_indices, upsample_nearest2d, upsample_bilinear2d: every real dtype;
//! - avg_pool2d, _adaptive_avg_pool2d: floats and int64.
//!
//! Arithmetic follows ExecuTorch's portable kernels: max pooling compares in the element type
//! and keeps the first maximum (`v > best`: a NaN only wins as the first element of a window);
//! average pooling sums in the element type (f16/bf16 round after every addition, int64
//! divides with truncation); adaptive pooling sums in f32; bilinear interpolation computes in
//! f32 (f64 for f64) and converts back (truncating for integers).

use pteron_core::{ArgAccess, ArgView, DtypeSet, Kernel, KernelError, KernelRegistry, ScalarType};

mod avg;
mod geom;
mod max;
mod upsample;

#[cfg(test)]
mod tests;

use avg::{adaptive_avg_pool2d_out, avg_pool2d_out};
pub use geom::{inside_taps, pooling_output_size};
use max::max_pool2d_with_indices_out;
use upsample::{upsample_bilinear2d_vec_out, upsample_nearest2d_vec_out};

/// Dtypes of max pooling and upsampling (ExecuTorch: REALHBF16).
const REAL: DtypeSet = DtypeSet::REAL;
/// Dtypes of average pooling (ExecuTorch: FLOATHBF16 and Long).
const AVG: DtypeSet = DtypeSet::FLOAT.union(DtypeSet::of(&[ScalarType::Long]));

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::max_pool2d_with_indices.out",
        Kernel::with_check(max_pool2d_with_indices_out, check_max_pool).dtypes(REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::avg_pool2d.out",
        Kernel::with_check(avg_pool2d_out, check_avg_pool).dtypes(AVG),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::_adaptive_avg_pool2d.out",
        Kernel::with_check(adaptive_avg_pool2d_out, check_adaptive).dtypes(AVG),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::adaptive_avg_pool2d.out",
        Kernel::with_check(adaptive_avg_pool2d_out, check_adaptive).dtypes(AVG),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::upsample_nearest2d.vec_out",
        Kernel::with_check(upsample_nearest2d_vec_out, check_nearest).dtypes(REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::upsample_bilinear2d.vec_out",
        Kernel::with_check(upsample_bilinear2d_vec_out, check_bilinear).dtypes(REAL),
    );
}

fn check_io(
    a: &ArgView,
    op: &'static str,
    input: usize,
    out: usize,
    dtypes: DtypeSet,
    ranks: core::ops::RangeInclusive<usize>,
) -> Result<(), KernelError> {
    let (x, o) = (a.tensor(input)?, a.tensor(out)?);
    if !dtypes.contains(x.dtype()) {
        return Err(KernelError::dtype(x.dtype(), op));
    }
    if o.dtype() != x.dtype() {
        return Err(KernelError::dtype(o.dtype(), op));
    }
    if !ranks.contains(&x.rank()) || o.rank() != x.rank() {
        return Err(KernelError::unsupported(format!(
            "{op}: input of rank {} (expects {ranks:?}, output of the same rank)",
            x.rank()
        )));
    }
    Ok(())
}
fn check_max_pool(a: &ArgView) -> Result<(), KernelError> {
    check_io(a, "max_pool2d_with_indices", 0, 6, REAL, 3..=4)?;
    let idx = a.tensor(7)?;
    if idx.dtype() != ScalarType::Long {
        return Err(KernelError::dtype(idx.dtype(), "max_pool2d indices"));
    }
    if idx.dim_order() != a.tensor(6)?.dim_order() {
        return Err(KernelError::unsupported(format!(
            "max_pool2d_with_indices: indices dim order {:?} differs from the output's {:?}",
            idx.dim_order(),
            a.tensor(6)?.dim_order()
        )));
    }
    a.bool(5)?;
    Ok(())
}
fn check_avg_pool(a: &ArgView) -> Result<(), KernelError> {
    a.bool(4)?;
    a.bool(5)?;
    a.opt_int(6)?;
    check_io(a, "avg_pool2d", 0, 7, AVG, 3..=4)
}
fn check_adaptive(a: &ArgView) -> Result<(), KernelError> {
    check_io(a, "adaptive_avg_pool2d", 0, 2, AVG, 3..=4)
}
fn check_nearest(a: &ArgView) -> Result<(), KernelError> {
    check_io(a, "upsample_nearest2d", 0, 3, REAL, 4..=4)
}
fn check_bilinear(a: &ArgView) -> Result<(), KernelError> {
    a.bool(2)?;
    check_io(a, "upsample_bilinear2d", 0, 4, REAL, 4..=4)
}
