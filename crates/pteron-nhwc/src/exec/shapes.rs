//! Shape inference: every node's output shape from its inputs' (XNNPACK's
//! `xnn_reshape_runtime` rules), at init and whenever an input arrives with a new shape.

use pteron_core::KernelError;

use super::{invalid, Executable, Step};
use crate::graph::{ConvKind, Node};
use crate::kernels::elementwise::broadcast;
use crate::quant::exec as qexec;
use crate::util::{Shape, MAX_DIMS};

impl Executable {
    /// Propagates shapes from the inputs through every node and sizes every value.
    pub(super) fn propagate(&mut self) -> Result<(), KernelError> {
        for i in 0..self.steps.len() {
            let s = infer(&self.steps[i], &self.shapes).map_err(|e| match e {
                KernelError::Shape(m) => {
                    KernelError::shape(format!("node {i} ({}): {m}", self.names[i]))
                }
                e => invalid(format!("node {i} ({}): {e}", self.names[i])),
            })?;
            let out = self.steps[i].node.output();
            self.shapes[out] = s;
        }
        for (v, s) in self.shapes.iter().enumerate() {
            self.sizes[v] = qexec::value_bytes(self.dtypes[v], s)?;
        }
        Ok(())
    }
}
/// The effective slice offsets (XNNPACK's rules for a given input shape).
pub(super) fn slice_offsets(node: &Node, xs: &Shape) -> Shape {
    let mut o = Shape::default();
    if let Node::Slice { offsets, .. } = node {
        o = *offsets;
        for (i, v) in o.dims_mut().iter_mut().enumerate() {
            *v = (*v).min(xs.dims().get(i).copied().unwrap_or(0));
        }
    }
    o
}

fn shape_err(msg: impl Into<String>) -> KernelError {
    KernelError::shape(msg)
}

/// The output shape of a step given the current shapes.
fn infer(st: &Step, shapes: &[Shape]) -> Result<Shape, KernelError> {
    Ok(match (&st.node, &st.prep) {
        (&Node::Binary { a, b, .. }, _) => broadcast(&shapes[a], &shapes[b])?,
        (&Node::Unary { x, .. }, _) => shapes[x],
        (&Node::Softmax { x, .. }, _) => {
            if shapes[x].rank() == 0 {
                return Err(shape_err("softmax of a scalar"));
            }
            shapes[x]
        }
        (&Node::Conv { conv, x, .. }, _) => {
            let xs = shapes[x];
            need_rank(&xs, 4, "convolution input")?;
            let d = xs.dims();
            if d[3] != conv.in_channels() {
                return Err(shape_err(format!(
                    "input has {} channels, the convolution takes {}",
                    d[3],
                    conv.in_channels()
                )));
            }
            let (oh, ow) = if conv.kind == ConvKind::Deconv {
                conv.win.deconv_out_hw(d[1], d[2], conv.adjustment)?
            } else {
                conv.win.out_hw(d[1], d[2])?
            };
            Shape::new(&[d[0], oh, ow, conv.out_channels()])?
        }
        (&Node::Pool { win, x, .. }, _) => {
            let xs = shapes[x];
            need_rank(&xs, 4, "pooling input")?;
            let d = xs.dims();
            let (oh, ow) = win.out_hw(d[1], d[2])?;
            Shape::new(&[d[0], oh, ow, d[3]])?
        }
        (&Node::GlobalAvgPool { x, keep_dims, .. }, _) => {
            let xs = shapes[x];
            let r = xs.rank();
            if r < 3 {
                return Err(shape_err("global pooling input of rank below 3"));
            }
            let mut d = [0usize; MAX_DIMS];
            d[..r].copy_from_slice(xs.dims());
            if keep_dims {
                d[r - 3] = 1;
                d[r - 2] = 1;
                Shape::new(&d[..r])?
            } else {
                d[r - 3] = d[r - 1];
                Shape::new(&d[..r - 2])?
            }
        }
        (
            Node::Transpose { .. }
            | Node::Reshape { .. }
            | Node::Slice { .. }
            | Node::Concat { .. }
            | Node::Pad { .. }
            | Node::Resize { .. },
            _,
        ) => layout_shape(&st.node, shapes)?,
        (Node::FullyConnected { .. } | Node::Bmm { .. }, _) => product_shape(&st.node, shapes)?,
    })
}

/// The output shape of a node that moves data (transpose, reshape, slice, concatenation,
/// padding, resizing).
fn layout_shape(node: &Node, shapes: &[Shape]) -> Result<Shape, KernelError> {
    Ok(match *node {
        Node::Transpose { perm, x, .. } => {
            let xs = shapes[x];
            need_rank(&xs, perm.rank(), "transpose input")?;
            let mut d = [0usize; MAX_DIMS];
            for i in 0..perm.rank() {
                d[i] = xs.dims()[perm.dims()[i]];
            }
            Shape::new(&d[..perm.rank()])?
        }
        Node::Reshape { new_shape, x, .. } => {
            let n = shapes[x].count()?;
            let mut o = new_shape;
            let dynamic = o.dims().iter().position(|&d| d == 0);
            match dynamic {
                Some(k) => {
                    let rest: usize = o
                        .dims()
                        .iter()
                        .filter(|&&d| d != 0)
                        .try_fold(1usize, |a, &d| a.checked_mul(d))
                        .ok_or(KernelError::SizeOverflow)?;
                    if rest == 0 || n % rest != 0 {
                        return Err(shape_err(format!(
                            "cannot reshape {} elements to {:?}",
                            n,
                            new_shape.dims()
                        )));
                    }
                    o.dims_mut()[k] = n / rest;
                }
                None => {
                    if o.count()? != n {
                        return Err(shape_err(format!(
                            "cannot reshape {} elements to {:?}",
                            n,
                            new_shape.dims()
                        )));
                    }
                }
            }
            o
        }
        Node::Slice {
            offsets, sizes, x, ..
        } => {
            let xs = shapes[x];
            need_rank(&xs, offsets.rank(), "slice input")?;
            let mut d = [0usize; MAX_DIMS];
            for i in 0..xs.rank() {
                let dim = xs.dims()[i];
                let off = offsets.dims()[i];
                let end = off
                    .checked_add(sizes.dims()[i])
                    .ok_or(KernelError::SizeOverflow)?;
                let size = if end == 0 {
                    dim.saturating_sub(off)
                } else {
                    end - off
                };
                let off = off.min(dim);
                d[i] = size.min(dim - off);
            }
            Shape::new(&d[..xs.rank()])?
        }
        Node::Concat {
            axis, inputs, n, ..
        } => {
            let first = shapes[inputs[0]];
            if axis >= first.rank() {
                return Err(shape_err(format!(
                    "concatenation axis {axis} of rank-{} inputs",
                    first.rank()
                )));
            }
            let mut o = first;
            let mut total = 0usize;
            for &v in &inputs[..n] {
                let s = shapes[v];
                if s.rank() != first.rank()
                    || s.dims()
                        .iter()
                        .zip(first.dims())
                        .enumerate()
                        .any(|(i, (a, b))| i != axis && a != b)
                {
                    return Err(shape_err("concatenated shapes differ off the axis"));
                }
                total = total
                    .checked_add(s.dims()[axis])
                    .ok_or(KernelError::SizeOverflow)?;
            }
            o.dims_mut()[axis] = total;
            o
        }
        Node::Pad { pre, post, x, .. } => {
            let xs = shapes[x];
            if pre.rank() < xs.rank() {
                return Err(shape_err("fewer paddings than dimensions"));
            }
            let mut d = [0usize; MAX_DIMS];
            for i in 0..xs.rank() {
                d[i] = xs.dims()[i] + pre.dims()[i] + post.dims()[i];
            }
            Shape::new(&d[..xs.rank()])?
        }
        Node::Resize {
            height, width, x, ..
        } => {
            let xs = shapes[x];
            need_rank(&xs, 4, "resize input")?;
            Shape::new(&[xs.dims()[0], height, width, xs.dims()[3]])?
        }
        _ => return Err(KernelError::invalid("not a data-movement node")),
    })
}

/// The output shape of a product (fully connected, batch matrix multiply).
fn product_shape(node: &Node, shapes: &[Shape]) -> Result<Shape, KernelError> {
    Ok(match *node {
        Node::FullyConnected {
            x,
            w,
            bias,
            transpose_w,
            ..
        } => {
            let xs = shapes[x];
            if xs.rank() == 0 {
                return Err(shape_err("fully connected input of rank 0"));
            }
            let ws = shapes[w];
            need_rank(&ws, 2, "filter")?;
            let (ic, oc) = if transpose_w {
                (ws.dims()[0], ws.dims()[1])
            } else {
                (ws.dims()[1], ws.dims()[0])
            };
            if xs.back(1) != ic {
                return Err(shape_err(format!(
                    "input has {} channels, filter {ic}",
                    xs.back(1)
                )));
            }
            if let Some(b) = bias {
                if shapes[b].count()? != oc {
                    return Err(shape_err("bias size differs from the output channels"));
                }
            }
            let mut o = xs;
            let r = o.rank();
            o.dims_mut()[r - 1] = oc;
            o
        }
        Node::Bmm {
            a, b, transpose_b, ..
        } => {
            let (sa, sb) = (shapes[a], shapes[b]);
            if sa.rank() < 2 || sb.rank() < 2 {
                return Err(shape_err("batch matrix multiply of rank below 2"));
            }
            let (m, k) = (sa.back(2), sa.back(1));
            let (kb, n) = if transpose_b {
                (sb.back(1), sb.back(2))
            } else {
                (sb.back(2), sb.back(1))
            };
            if k != kb {
                return Err(shape_err(format!("inner dims {k} and {kb} differ")));
            }
            let ba = Shape::new(&sa.dims()[..sa.rank() - 2])?;
            let bb = Shape::new(&sb.dims()[..sb.rank() - 2])?;
            let bo = broadcast(&ba, &bb)?;
            let mut d = [0usize; MAX_DIMS];
            let r = bo.rank();
            if r + 2 > MAX_DIMS {
                return Err(shape_err("batch matrix multiply of rank above 6"));
            }
            d[..r].copy_from_slice(bo.dims());
            d[r] = m;
            d[r + 1] = n;
            Shape::new(&d[..r + 2])?
        }

        _ => return Err(KernelError::invalid("not a product node")),
    })
}

fn need_rank(s: &Shape, r: usize, what: &str) -> Result<(), KernelError> {
    if s.rank() != r {
        Err(shape_err(format!(
            "{what} of rank {}, expected {r}",
            s.rank()
        )))
    } else {
        Ok(())
    }
}
