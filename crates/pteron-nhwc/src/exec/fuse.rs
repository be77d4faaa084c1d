//! Fusion of steps at init: a 3×3 depthwise convolution with the pointwise convolutions
//! around it (`kernels::fused`), and a residual connection's add with the convolution or
//! chain before it (the add as the GEMM's epilogue).

use super::{Executable, Fuse, Home, Prep, Step};
use crate::graph::{BinaryOp, DType, Node};
use crate::kernels;
use crate::kernels::gemm::ConvWeights;

/// The chain step `i` runs: the kernels' view, and the value it reads.
pub(super) fn chain_at(steps: &[Step], i: usize) -> Option<(kernels::fused::Chain<'_>, usize)> {
    let Fuse::Chain {
        expand,
        project,
        add,
    } = steps[i].fuse
    else {
        return None;
    };
    let end = if add { i.checked_sub(1)? } else { i };
    let d = if project { end.checked_sub(1)? } else { end };
    let Prep::Dw(dw) = &steps[d].prep else {
        return None;
    };
    let conv = |k: usize| match (&steps[k].prep, &steps[k].node) {
        (Prep::Conv(cw), Node::Conv { x, .. }) => Some((cw, *x)),
        _ => None,
    };
    let (e, input) = if expand {
        let (cw, x) = conv(d.checked_sub(1)?)?;
        (Some(cw), x)
    } else {
        let Node::Conv { x, .. } = steps[d].node else {
            return None;
        };
        (None, x)
    };
    let p = if project { Some(conv(end)?.0) } else { None };
    Some((
        kernels::fused::Chain {
            expand: e,
            dw,
            project: p,
            add: None,
        },
        input,
    ))
}

/// Widened maps from which a pointwise and a depthwise convolution are fused: smaller ones
/// stay in the L2 cache between the two nodes anyway, and bands would recompute more rows.
pub(super) const FUSE_MIN_BYTES: usize = 1 << 20;

impl Executable {
    /// Fuses each 3×3 depthwise convolution with the pointwise convolution that only feeds
    /// it and the one that only reads it, where the map between them is at least `min_bytes`
    /// (`kernels::fused`). The chain's last step runs it; its input lives until then.
    pub(super) fn fuse(&mut self, min_bytes: usize) {
        let nn = self.steps.len();
        // A value only step `reader` reads, worth not storing.
        let between = |d: &Self, v: usize, reader: usize| {
            d.homes[v] == Home::Arena
                && d.lifetimes[v].1 == reader
                && !d.outputs.iter().any(|&(_, o)| o == v)
                && d.dtypes[v] == DType::F32
                && d.shapes[v].rank() == 4
                && d.sizes[v] >= min_bytes
        };
        fn pointwise(st: &Step) -> Option<(&ConvWeights, usize)> {
            match (&st.prep, &st.node) {
                (Prep::Conv(cw), Node::Conv { x, .. }) if cw.is_pointwise() => Some((cw, *x)),
                _ => None,
            }
        }
        for j in 0..nn {
            let (Prep::Dw(dw), Node::Conv { x: dx, .. }) =
                (&self.steps[j].prep, &self.steps[j].node)
            else {
                continue;
            };
            if self.steps[j].fuse != Fuse::No || !kernels::fused::fusable_dw(dw) {
                continue;
            }
            let dx = *dx;
            let d_out = self.steps[j].node.output();
            let expand = j > 0
                && self.steps[j - 1].fuse == Fuse::No
                && pointwise(&self.steps[j - 1]).is_some_and(|(cw, _)| {
                    kernels::fused::fusable_expand(cw, dw)
                        && self.steps[j - 1].node.output() == dx
                        && between(self, dx, j)
                });
            let project = j + 1 < nn
                && pointwise(&self.steps[j + 1]).is_some_and(|(cw, x)| {
                    kernels::fused::fusable_project(dw, cw)
                        && x == d_out
                        && between(self, d_out, j + 1)
                });
            if !expand && !project {
                continue;
            }
            let first = if expand { j - 1 } else { j };
            let last = if project { j + 1 } else { j };
            let input = match &self.steps[first].node {
                Node::Conv { x, .. } => *x,
                _ => continue,
            };
            let made_here = self.made_before(input, first);
            let out = self.steps[last].node.output();
            let ok = made_here
                && self.homes[input] == Home::Arena
                && self.dtypes[input] == DType::F32
                && self.dtypes[out] == DType::F32
                && self.shapes[input].rank() == 4
                && self.shapes[out].rank() == 4;
            if !ok {
                continue;
            }
            for k in first..last {
                self.steps[k].fuse = Fuse::IntoNext;
            }
            self.steps[last].fuse = Fuse::Chain {
                expand,
                project,
                add: false,
            };
            self.names[last] = match (expand, project) {
                (true, true) => "XNNConv2d+XNNDepthwiseConv2d+XNNConv2d",
                (true, false) => "XNNConv2d+XNNDepthwiseConv2d",
                _ => "XNNDepthwiseConv2d+XNNConv2d",
            };
            self.lifetimes[input].1 = self.lifetimes[input].1.max(last);
        }
    }

    /// Whether `v` is an arena value some step before `step` produced, other than a reshape
    /// (never a method tensor read in place: a fused step reads it where the node's own
    /// operands do not say).
    fn made_before(&self, v: usize, step: usize) -> bool {
        (0..step).any(|p| {
            self.steps[p].node.output() == v && !matches!(self.steps[p].node, Node::Reshape { .. })
        })
    }

    /// Runs each residual connection's add (`clamp(conv + r)`, same shapes) as the epilogue
    /// of the convolution or fused chain just before it, when only the add reads the
    /// convolution's output: MobileNetV2's ten adds stop being passes over memory (and, on
    /// several threads, waits for every thread). Bit-identical: the sum is rounded once
    /// either way.
    pub(super) fn fuse_residuals(&mut self) {
        for i in 1..self.steps.len() {
            let Node::Binary {
                op: BinaryOp::Add,
                a,
                b,
                out,
                ..
            } = self.steps[i].node
            else {
                continue;
            };
            if self.steps[i].fuse != Fuse::No {
                continue;
            }
            let prev = &self.steps[i - 1];
            let c = prev.node.output();
            let r = if a == c && b != c {
                b
            } else if b == c && a != c {
                a
            } else {
                continue;
            };
            let f32_4d = |v: usize| {
                self.homes[v] == Home::Arena
                    && self.dtypes[v] == DType::F32
                    && self.shapes[v].rank() == 4
            };
            let ok = f32_4d(c)
                && f32_4d(r)
                && f32_4d(out)
                && self.shapes[r] == self.shapes[c]
                && self.shapes[out] == self.shapes[c]
                && self.lifetimes[c].1 == i
                && !self.outputs.iter().any(|&(_, o)| o == c);
            if !ok {
                continue;
            }
            let (fuse, input) = match (prev.fuse, &prev.prep, &prev.node) {
                (Fuse::No, Prep::Conv(cw), &Node::Conv { x, .. }) if cw.takes_residual() => {
                    (Fuse::ConvAdd, x)
                }
                (
                    Fuse::Chain {
                        expand,
                        project: true,
                        add: false,
                    },
                    Prep::Conv(cw),
                    _,
                ) if cw.takes_residual() => match chain_at(&self.steps, i - 1) {
                    Some((_, x)) => (
                        Fuse::Chain {
                            expand,
                            project: true,
                            add: true,
                        },
                        x,
                    ),
                    None => continue,
                },
                _ => continue,
            };
            if !(f32_4d(input) && self.made_before(input, i - 1)) {
                continue;
            }
            self.steps[i - 1].fuse = Fuse::IntoNext;
            self.steps[i].fuse = fuse;
            self.names[i] = match (fuse, self.names[i - 1]) {
                (Fuse::ConvAdd, _) => "XNNConv2d+XNNAdd",
                (_, "XNNConv2d+XNNDepthwiseConv2d+XNNConv2d") => {
                    "XNNConv2d+XNNDepthwiseConv2d+XNNConv2d+XNNAdd"
                }
                _ => "XNNDepthwiseConv2d+XNNConv2d+XNNAdd",
            };
            self.lifetimes[input].1 = self.lifetimes[input].1.max(i);
        }
    }
}
