//! Reflection and replication padding over the last 1, 2 or 3 dims:
//! `reflection_pad{1,2,3}d.out`, `replication_pad{1,2,3}d.out`.
//!
//! As ExecuTorch's portable kernels (`padding_util.h`): the input has `n + 1` or `n + 2` dims,
//! `padding` is `[left, right, top, bottom, front, back]` (last dim first, 2·n entries, negative
//! entries crop), reflection padding must be smaller than the padded dim, every dtype (the
//! kernels copy elements). Inputs and outputs are contiguous.

use pteron_core::{
    ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry, ScalarType,
};

use crate::util::{read_int_list, require_contiguous};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    let all = DtypeSet::ALL;
    pteron_core::register_op!(
        S,
        r,
        "aten::reflection_pad1d.out",
        Kernel::with_check(reflection_pad1d_out, check_pad::<1, true>).dtypes(all),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::reflection_pad2d.out",
        Kernel::with_check(reflection_pad2d_out, check_pad::<2, true>).dtypes(all),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::reflection_pad3d.out",
        Kernel::with_check(reflection_pad3d_out, check_pad::<3, true>).dtypes(all),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::replication_pad1d.out",
        Kernel::with_check(replication_pad1d_out, check_pad::<1, false>).dtypes(all),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::replication_pad2d.out",
        Kernel::with_check(replication_pad2d_out, check_pad::<2, false>).dtypes(all),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::replication_pad3d.out",
        Kernel::with_check(replication_pad3d_out, check_pad::<3, false>).dtypes(all),
    );
}

fn op_name(n: usize, reflect: bool) -> &'static str {
    match (n, reflect) {
        (1, true) => "reflection_pad1d",
        (2, true) => "reflection_pad2d",
        (3, true) => "reflection_pad3d",
        (1, false) => "replication_pad1d",
        (2, false) => "replication_pad2d",
        _ => "replication_pad3d",
    }
}

/// Arguments: [self, padding, out].
fn check_pad<const N: usize, const REFLECT: bool>(a: &ArgView) -> Result<(), KernelError> {
    let op = op_name(N, REFLECT);
    let (x, o) = (a.tensor(0)?, a.tensor(2)?);
    if !ScalarType::REAL_AND_BOOL.contains(&x.dtype()) {
        return Err(KernelError::dtype(x.dtype(), op));
    }
    if o.dtype() != x.dtype() {
        return Err(KernelError::dtype(o.dtype(), op));
    }
    if x.rank() != N + 1 && x.rank() != N + 2 {
        return Err(KernelError::shape(format!(
            "{op}: input of rank {} (expects {} or {})",
            x.rank(),
            N + 1,
            N + 2
        )));
    }
    let l = a.int_list(1)?;
    if l.len() != 2 * N {
        return Err(KernelError::invalid(format!(
            "{op}: padding has {} entries (expects {})",
            l.len(),
            2 * N
        )));
    }
    require_contiguous(op, &[x, o])
}

/// ExecuTorch's `reflection_ix`: the input index read for output index `j` of a dim of `size`
/// padded by `pad` before it.
#[inline]
fn reflection_ix(j: i64, size: i64, pad: i64) -> i64 {
    if j < pad {
        pad - j
    } else if j < size + pad {
        j - pad
    } else {
        2 * size + pad - j - 2
    }
}

/// ExecuTorch's `replication_ix`.
#[inline]
fn replication_ix(j: i64, size: i64, pad: i64) -> i64 {
    if j < pad {
        0
    } else if j < size + pad {
        j - pad
    } else {
        size - 1
    }
}

/// The geometry of one padding call, as 3 padded dims (missing leading ones have size 1 and
/// no padding) under `outer` independent planes.
struct PadGeom {
    outer: usize,
    input: [usize; 3],
    output: [usize; 3],
    before: [i64; 3],
}

fn pad_geom(
    ctx: &KernelContext,
    n: usize,
    reflect: bool,
) -> Result<(PadGeom, pteron_core::Dims), KernelError> {
    let op = op_name(n, reflect);
    let x = *ctx.tensor(0)?;
    let r = x.rank();
    if r != n + 1 && r != n + 2 {
        return Err(KernelError::shape(format!(
            "{op}: input {:?} must have {} or {} dims",
            x.sizes(),
            n + 1,
            n + 2
        )));
    }
    let (pads, len) = read_int_list(ctx, 1)?;
    if len != 2 * n {
        return Err(KernelError::invalid(format!(
            "{op}: padding has {len} entries (expects {})",
            2 * n
        )));
    }
    let mut g = PadGeom {
        outer: x.sizes()[..r - n].iter().product(),
        input: [1; 3],
        output: [1; 3],
        before: [0; 3],
    };
    let mut out = x.dims();
    // Padded dim k counts from the last: k = 0 is the last dim, padded by pads[0], pads[1].
    for k in 0..n {
        let d = r - 1 - k;
        let size = x.size(d) as i64;
        let (lo, hi) = (pads[2 * k], pads[2 * k + 1]);
        let o = size
            .checked_add(lo)
            .and_then(|s| s.checked_add(hi))
            .filter(|&o| o >= 0)
            .ok_or_else(|| {
                KernelError::invalid(format!(
                    "{op}: padding ({lo}, {hi}) of a dim of size {size} gives a negative size"
                ))
            })?;
        if reflect && (lo >= size || hi >= size) {
            return Err(KernelError::invalid(format!(
                "{op}: padding ({lo}, {hi}) must be smaller than the dim it pads ({size})"
            )));
        }
        if !reflect && o > 0 && size == 0 {
            return Err(KernelError::invalid(format!(
                "{op}: cannot replicate an empty dim"
            )));
        }
        let slot = 2 - k;
        g.input[slot] = size as usize;
        g.output[slot] = o as usize;
        g.before[slot] = lo;
        out.as_mut_slice()[d] = o as usize;
    }
    Ok((g, out))
}

/// Copies every output element from the input element its padding index names. Each computed
/// index is bounds-checked (an error, never an out-of-range read).
fn pad_copy<T: Copy>(
    g: &PadGeom,
    x: &[T],
    out: &mut [T],
    ix: fn(i64, i64, i64) -> i64,
) -> Result<(), KernelError> {
    let [id, ih, iw] = g.input;
    let [od, oh, ow] = g.output;
    let in_plane = id * ih * iw;
    let out_plane = od * oh * ow;
    if x.len() < g.outer * in_plane || out.len() < g.outer * out_plane {
        return Err(KernelError::invalid(
            "pad: tensor data shorter than its shape",
        ));
    }
    if out_plane == 0 {
        return Ok(());
    }
    let idx = |j: usize, size: usize, pad: i64| -> Result<usize, KernelError> {
        let i = ix(j as i64, size as i64, pad);
        if i < 0 || i >= size as i64 {
            return Err(KernelError::invalid(format!(
                "pad: output index {j} maps to input index {i}, outside a dim of size {size}"
            )));
        }
        Ok(i as usize)
    };
    for p in 0..g.outer {
        let xp = &x[p * in_plane..(p + 1) * in_plane];
        let op = &mut out[p * out_plane..(p + 1) * out_plane];
        for d in 0..od {
            let sd = idx(d, id, g.before[0])?;
            for h in 0..oh {
                let sh = idx(h, ih, g.before[1])?;
                let src = &xp[(sd * ih + sh) * iw..][..iw];
                let dst = &mut op[(d * oh + h) * ow..][..ow];
                for (w, v) in dst.iter_mut().enumerate() {
                    *v = src[idx(w, iw, g.before[2])?];
                }
            }
        }
    }
    Ok(())
}

fn pad_out(ctx: &mut KernelContext, n: usize, reflect: bool) -> Result<(), KernelError> {
    let op = op_name(n, reflect);
    require_contiguous(op, &[ctx.tensor(0)?, ctx.tensor(2)?])?;
    let (g, out_sizes) = pad_geom(ctx, n, reflect)?;
    ctx.resize(2, &out_sizes)?;
    let ([xr], [o]) = ctx.io([0], [2])?;
    if xr.info.dtype() != o.info.dtype() {
        return Err(KernelError::dtype(o.info.dtype(), op));
    }
    let ix = if reflect {
        reflection_ix
    } else {
        replication_ix
    };
    // A pure copy: dispatch on the element size only.
    match xr.info.dtype().elem_size() {
        1 => pad_copy::<u8>(&g, xr.bytes, o.bytes, ix),
        2 => pad_copy::<u16>(&g, cast(xr.bytes)?, cast_mut(o.bytes)?, ix),
        4 => pad_copy::<u32>(&g, cast(xr.bytes)?, cast_mut(o.bytes)?, ix),
        8 => pad_copy::<u64>(&g, cast(xr.bytes)?, cast_mut(o.bytes)?, ix),
        _ => Err(KernelError::dtype(xr.info.dtype(), op)),
    }
}

fn cast<T: bytemuck::Pod>(b: &[u8]) -> Result<&[T], KernelError> {
    bytemuck::try_cast_slice(b).map_err(|_| KernelError::invalid("pad: misaligned tensor data"))
}
fn cast_mut<T: bytemuck::Pod>(b: &mut [u8]) -> Result<&mut [T], KernelError> {
    bytemuck::try_cast_slice_mut(b).map_err(|_| KernelError::invalid("pad: misaligned tensor data"))
}

fn reflection_pad1d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    pad_out(ctx, 1, true)
}
fn reflection_pad2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    pad_out(ctx, 2, true)
}
fn reflection_pad3d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    pad_out(ctx, 3, true)
}
fn replication_pad1d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    pad_out(ctx, 1, false)
}
fn replication_pad2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    pad_out(ctx, 2, false)
}
fn replication_pad3d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    pad_out(ctx, 3, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::{Bool, KernelFn, ScalarType as St};

    fn run<T: pteron_core::Element>(
        f: KernelFn,
        check: pteron_core::kernel::CheckFn,
        sizes: &[usize],
        data: &[T],
        pads: &[i64],
    ) -> Result<(Vec<usize>, Vec<T>), KernelError> {
        let mut c = TestCall::new();
        c.tensor(sizes, data);
        c.int_list(pads);
        let o = c.out(T::DTYPE, &vec![1; sizes.len()]);
        c.ret(o);
        c.check(check)?;
        c.run(f)?;
        Ok((c.info(o).sizes().to_vec(), c.output::<T>(o)))
    }

    #[test]
    fn pad1d() {
        // torch.nn.functional.pad(torch.arange(4.).view(1, 4), (2, 1), mode="reflect")
        let x = [0.0f32, 1., 2., 3.];
        let (s, v) = run(
            reflection_pad1d_out,
            check_pad::<1, true>,
            &[1, 4],
            &x,
            &[2, 1],
        )
        .unwrap();
        assert_eq!(s, vec![1, 7]);
        assert_eq!(v, vec![2., 1., 0., 1., 2., 3., 2.]);
        let (s, v) = run(
            replication_pad1d_out,
            check_pad::<1, false>,
            &[1, 4],
            &x,
            &[2, 1],
        )
        .unwrap();
        assert_eq!(s, vec![1, 7]);
        assert_eq!(v, vec![0., 0., 0., 1., 2., 3., 3.]);
        // Negative padding crops.
        let (s, v) = run(
            replication_pad1d_out,
            check_pad::<1, false>,
            &[1, 4],
            &x,
            &[-1, 2],
        )
        .unwrap();
        assert_eq!(s, vec![1, 5]);
        assert_eq!(v, vec![1., 2., 3., 3., 3.]);
        // Reflection padding must be smaller than the dim.
        assert!(run(
            reflection_pad1d_out,
            check_pad::<1, true>,
            &[1, 4],
            &x,
            &[4, 0]
        )
        .is_err());
        // Wrong padding length, wrong rank: errors at load.
        assert!(run(
            reflection_pad1d_out,
            check_pad::<1, true>,
            &[1, 4],
            &x,
            &[1]
        )
        .is_err());
        assert!(run(
            reflection_pad1d_out,
            check_pad::<1, true>,
            &[4],
            &x,
            &[1, 1]
        )
        .is_err());
    }

    #[test]
    fn pad2d_and_3d() {
        // 3x3 arange, reflection (1, 1, 1, 0): rows [1, 0, 1, 2] of the column-reflected rows.
        let x: Vec<i64> = (0..9).collect();
        let (s, v) = run(
            reflection_pad2d_out,
            check_pad::<2, true>,
            &[1, 3, 3],
            &x,
            &[1, 1, 1, 0],
        )
        .unwrap();
        assert_eq!(s, vec![1, 4, 5]);
        #[rustfmt::skip]
        assert_eq!(v, vec![
            4, 3, 4, 5, 4,
            1, 0, 1, 2, 1,
            4, 3, 4, 5, 4,
            7, 6, 7, 8, 7,
        ]);
        let (s, v) = run(
            replication_pad2d_out,
            check_pad::<2, false>,
            &[1, 1, 3, 3],
            &x,
            &[0, 1, 0, 1],
        )
        .unwrap();
        assert_eq!(s, vec![1, 1, 4, 4]);
        assert_eq!(v, vec![0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 8, 8, 6, 7, 8, 8]);
        // 3-d: [1, 2, 1, 2] padded by 1 in front (depth) replicates plane 0.
        let b: Vec<Bool> = [1u8, 0, 0, 1].iter().map(|&v| Bool(v)).collect();
        let (s, v) = run(
            replication_pad3d_out,
            check_pad::<3, false>,
            &[1, 2, 1, 2],
            &b,
            &[0, 0, 0, 0, 1, 0],
        )
        .unwrap();
        assert_eq!(s, vec![1, 3, 1, 2]);
        assert_eq!(
            v.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![1, 0, 1, 0, 0, 1]
        );
        let h: Vec<half::f16> = (0..8).map(|i| half::f16::from_f32(i as f32)).collect();
        let (s, v) = run(
            reflection_pad3d_out,
            check_pad::<3, true>,
            &[1, 2, 2, 2],
            &h,
            &[1, 0, 0, 0, 0, 1],
        )
        .unwrap();
        assert_eq!(s, vec![1, 3, 2, 3]);
        let f: Vec<f32> = v.iter().map(|x| x.to_f32()).collect();
        assert_eq!(
            f,
            vec![1., 0., 1., 3., 2., 3., 5., 4., 5., 7., 6., 7., 1., 0., 1., 3., 2., 3.]
        );
    }

    #[test]
    fn replication_of_empty_dim_is_an_error() {
        let x: [f32; 0] = [];
        assert!(run(
            replication_pad1d_out,
            check_pad::<1, false>,
            &[2, 0],
            &x,
            &[1, 1]
        )
        .is_err());
        // Cropping everything away is fine.
        let x = [1.0f32, 2.];
        let (s, v) = run(
            replication_pad1d_out,
            check_pad::<1, false>,
            &[1, 2],
            &x,
            &[-1, -1],
        )
        .unwrap();
        assert_eq!(s, vec![1, 0]);
        assert!(v.is_empty());
    }

    #[test]
    fn hostile_paddings_never_panic() {
        let x = [1.0f32, 2., 3.];
        let big = 1i64 << 62;
        for pads in [
            [i64::MAX, 0],
            [i64::MIN, 0],
            [0, i64::MAX],
            [i64::MAX - 1, -(i64::MAX - 1)],
            [-big, big],
            [big, -big],
        ] {
            let _ = run(
                replication_pad1d_out,
                check_pad::<1, false>,
                &[1, 3],
                &x,
                &pads,
            );
            let _ = run(
                reflection_pad1d_out,
                check_pad::<1, true>,
                &[1, 3],
                &x,
                &pads,
            );
        }
    }

    #[test]
    fn dtype_mismatch_fails_at_load() {
        let mut c = TestCall::new();
        c.tensor(&[1, 2], &[1.0f32, 2.]);
        c.int_list(&[1, 1]);
        let o = c.out(St::Double, &[1, 4]);
        c.ret(o);
        assert!(c.check(check_pad::<1, true>).is_err());
    }
}
