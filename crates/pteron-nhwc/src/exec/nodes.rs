//! The float32 kernels of steps that run on their own (not fused): one call per node type.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::simd::level;

use crate::graph::Node;
use crate::kernels::elementwise::{binary, unary};
use crate::kernels::gemm::{bmm, fully_connected};
use crate::kernels::layout;
use crate::kernels::spatial::{depthwise, global_mean, pool, Geom};
use crate::util::{f32s, Shape, MAX_DIMS};

use super::shapes::slice_offsets;
use super::{invalid, Prep};

/// Runs `node` with what it prepared: `ins` are its operands' bytes in input order (unused
/// slots empty), `o` its output of shape `os`; `shapes` are every value's current shapes.
pub(super) fn run_node(
    par: &dyn Parallel,
    node: &Node,
    prep: &Prep,
    shapes: &[Shape],
    ins: [&[u8]; 5],
    o: &mut [f32],
    os: Shape,
) -> Result<(), KernelError> {
    let [a, b, c, d, e] = ins;
    match (node, prep) {
        (
            &Node::Binary {
                op,
                a: va,
                b: vb,
                clamp,
                ..
            },
            _,
        ) => binary(
            par,
            op,
            clamp,
            f32s(a)?,
            &shapes[va],
            f32s(b)?,
            &shapes[vb],
            o,
            &os,
        )?,
        (&Node::Unary { op, .. }, _) => unary(par, op, f32s(a)?, o)?,
        (&Node::Softmax { .. }, _) => {
            let row = os.dims().last().copied().unwrap_or(1);
            if row > 0 {
                let l = level();
                let x = f32s(a)?;
                let x = x
                    .get(..o.len())
                    .ok_or_else(|| invalid("softmax input too short"))?;
                pteron_kernels_cpu::par::for_chunks_mut(par, o, row * 64, 1, &|k, oc| {
                    let xs = &x[k * row * 64..k * row * 64 + oc.len()];
                    pteron_kernels_cpu::norm::softmax_rows(l, xs, oc, row)
                });
            }
        }
        (&Node::FullyConnected { x, bias, clamp, .. }, Prep::Fc { filter, bias: cb }) => {
            let xs = &shapes[x];
            let ic = xs.back(1);
            let oc = os.back(1);
            let m = if ic == 0 { 0 } else { xs.count()? / ic };
            // Inputs: x, w (when dynamic), bias (when dynamic).
            let dyn_bias = if bias.is_some() && cb.is_none() {
                Some(f32s(c)?)
            } else {
                None
            };
            let bias = cb.as_deref().or(dyn_bias);
            fully_connected(par, f32s(a)?, m, ic, oc, filter, f32s(b)?, bias, clamp, o)?;
        }
        (&Node::Conv { x, .. }, Prep::Dw(dw)) => {
            let xs = shapes[x].dims();
            let g = Geom {
                n: xs[0],
                ih: xs[1],
                iw: xs[2],
                oh: os.dims()[1],
                ow: os.dims()[2],
                c: xs[3],
            };
            depthwise(par, dw, g, f32s(a)?, o)?;
        }
        (
            &Node::Pool {
                kind,
                win,
                clamp,
                x,
                ..
            },
            _,
        ) => {
            let xs = shapes[x].dims();
            let g = Geom {
                n: xs[0],
                ih: xs[1],
                iw: xs[2],
                oh: os.dims()[1],
                ow: os.dims()[2],
                c: xs[3],
            };
            pool(par, kind, &win, clamp, g, f32s(a)?, o)?;
        }
        (&Node::GlobalAvgPool { x, clamp, .. }, _) => {
            let xs = shapes[x].dims();
            let r = xs.len();
            let outer: usize = xs[..r - 3].iter().product();
            global_mean(
                level(),
                f32s(a)?,
                outer,
                xs[r - 3] * xs[r - 2],
                xs[r - 1],
                clamp,
                o,
            )?;
        }
        (&Node::Transpose { perm, x, .. }, _) => {
            layout::transpose(par, f32s(a)?, &shapes[x], &perm, o)?
        }
        (&Node::Reshape { .. }, _) => {
            let x = f32s(a)?;
            let n = o.len();
            o.copy_from_slice(
                x.get(..n)
                    .ok_or_else(|| invalid("reshape input too short"))?,
            );
        }
        (&Node::Slice { x, .. }, _) => {
            let offs = slice_offsets(node, &shapes[x]);
            layout::slice(
                f32s(a)?,
                &shapes[x],
                &offs.dims()[..shapes[x].rank()],
                &os,
                o,
            )?
        }
        (
            &Node::Concat {
                inputs, n, axis, ..
            },
            _,
        ) => {
            let all = [a, b, c, d, e];
            let mut parts: [(&[f32], Shape); 5] = [(&[], Shape::default()); 5];
            for k in 0..n {
                parts[k] = (f32s(all[k])?, shapes[inputs[k]]);
            }
            layout::concat(&parts[..n], axis, o, &os)?
        }
        (&Node::Pad { pre, value, x, .. }, _) => {
            layout::pad(f32s(a)?, &shapes[x], pre.dims(), value, o, &os)?
        }
        (
            &Node::Resize {
                align_corners,
                legacy,
                x,
                ..
            },
            _,
        ) => {
            let xs = shapes[x].dims();
            layout::resize_bilinear(
                f32s(a)?,
                xs[0],
                xs[1],
                xs[2],
                xs[3],
                os.dims()[1],
                os.dims()[2],
                align_corners,
                legacy,
                o,
            )?
        }
        (
            &Node::Bmm {
                a: va,
                b: vb,
                transpose_b,
                ..
            },
            _,
        ) => batched_matmul(
            par,
            shapes,
            [va, vb],
            transpose_b,
            f32s(a)?,
            f32s(b)?,
            o,
            &os,
        )?,
        (node, _) => {
            return Err(invalid(format!("node {node:?} has no prepared kernel")));
        }
    }
    Ok(())
}

/// A batched product, the operands' batch dims broadcast over the output's.
#[allow(clippy::too_many_arguments)]
fn batched_matmul(
    par: &dyn Parallel,
    shapes: &[Shape],
    [va, vb]: [usize; 2],
    transpose_b: bool,
    a: &[f32],
    b: &[f32],
    o: &mut [f32],
    os: &Shape,
) -> Result<(), KernelError> {
    let (sa, sb) = (shapes[va], shapes[vb]);
    let (m, k) = (sa.back(2), sa.back(1));
    let n = os.back(1);
    let r = os.rank();
    let batch_dims = &os.dims()[..r - 2];
    let batches: usize = batch_dims.iter().product();
    // Strides of each operand's batch dims over the output's (0 where broadcast).
    let bstrides = |s: &Shape| {
        let mut st = [0usize; MAX_DIMS];
        let br = s.rank() - 2;
        let off = (r - 2) - br;
        let mut acc = 1;
        for q in (0..br).rev() {
            st[q + off] = if s.dims()[q] == 1 { 0 } else { acc };
            acc *= s.dims()[q];
        }
        st
    };
    let (stra, strb) = (bstrides(&sa), bstrides(&sb));
    let index = |i: usize| {
        let (mut ia, mut ib, mut rem) = (0, 0, i);
        for q in (0..r - 2).rev() {
            let x = rem % batch_dims[q];
            rem /= batch_dims[q];
            ia += x * stra[q];
            ib += x * strb[q];
        }
        (ia, ib)
    };
    bmm(par, a, b, o, batches, &index, m, k, n, transpose_b)
}
