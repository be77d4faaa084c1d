//! Channels-last regions of portable programs.
//!
//! A portable `.pte` keeps a convolution network in PyTorch's channels-first order: every
//! convolution, batch norm and clamp is its own call over NCHW tensors. [`NhwcPartitioner`]
//! takes each run of such calls at method load and runs it on this crate's engine, in the
//! channels-last order the XNNPACK delegate uses, as if the exporter had lowered it:
//!
//! - `convolution` (2-d, not transposed) becomes a convolution node (depthwise when every group
//!   has one input channel), with a following inference batch norm folded into its filter and
//!   bias and a following `relu` / `hardtanh` / `clamp` into its output clamp (the same
//!   folding, in the same arithmetic, as [`pteron_kernels_cpu::conv`]);
//! - `add` / `sub` (alpha 1) and `mul` of tensors that broadcast become binary nodes, with a
//!   following clamp;
//! - a lone clamp becomes a clamp node; `mean` over the two spatial dims a global average pool;
//!   `avg_pool2d` without padding an average pool (max pooling is left out: the engine's max
//!   does not propagate NaN as the portable kernel's comparisons do);
//! - tensors entering the region are transposed to channels-last once, tensors leaving it (read
//!   by a later call or returned) back to channels-first; values private to the region exist
//!   only in the engine's own arena, in channels-last order.
//!
//! Filters are reordered (`[out, in, kh, kw]` to `[out, kh, kw, in]`) and folded while the
//! engine packs them, one at a time. Anything else ends the region; a region with fewer than
//! [`MIN_CONVS`] convolutions is left to the portable kernels (two layout transposes would cost
//! more than they save). Outputs differ from the channels-first kernels' only by summation
//! order.

use std::collections::HashMap;
use std::ops::Range;

use pteron_core::{
    ArgAccess, CallGraph, Dynamism, KernelError, PageRelease, Partitioner, PrepareContext, Region,
    ScalarType, TensorInfo, Value as PValue,
};
use pteron_kernels_cpu::conv::{batch_norm_of, clamp_of, pair};

use crate::exec::Executable;
use crate::graph::{
    BinaryOp, Clamp, ConstSource, Conv, ConvKind, DType, Graph, Kind, Node, PoolKind, UnaryOp,
    Value, Window,
};
use crate::util::Shape;
use crate::EngineOptions;

/// Fewest convolutions in a region worth its layout transposes.
pub const MIN_CONVS: usize = 2;
/// Most bytes the engine may plan for one region (its arena and scratch).
const MAX_REGION_BYTES: u64 = 16 << 30;

const CONVOLUTION: &str = "aten::convolution.out";
const MEAN: &str = "aten::mean.out";
const NCHW_TO_NHWC: [usize; 4] = [0, 2, 3, 1];
const NHWC_TO_NCHW: [usize; 4] = [0, 3, 1, 2];

/// Runs the convolution regions of portable programs channels-last (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct NhwcPartitioner {
    /// How the engine runs each region.
    pub options: EngineOptions,
}

impl NhwcPartitioner {
    pub fn new(options: EngineOptions) -> Self {
        NhwcPartitioner { options }
    }
}

impl Partitioner for NhwcPartitioner {
    fn name(&self) -> &str {
        "nhwc"
    }

    fn partition<'p>(&self, g: &CallGraph<'_, 'p>) -> Result<Vec<Region<'p>>, KernelError> {
        let mut regions = Vec::new();
        let mut k = 0;
        while k < g.len() {
            let mut b = Builder::default();
            let end = b.scan(g, k);
            if b.convs >= MIN_CONVS {
                // A region the engine refuses to prepare runs on the portable kernels.
                if let Ok(r) = b.finish(g, k..end, &self.options) {
                    regions.push(r);
                }
            }
            k = end.max(k + 1);
        }
        Ok(regions)
    }
}

/// A constant the engine computes while preparing: a reordered (and folded) filter or a bias.
#[derive(Debug)]
enum Source<'g> {
    /// A PyTorch filter `[cout, gin, kh, kw]` as the engine reads it: `[cout, kh, kw, gin]`,
    /// or `[1, kh, kw, cout]` for a depthwise one; each output channel times `scale`.
    Filter {
        w: &'g [f32],
        cout: usize,
        gin: usize,
        taps: usize,
        depthwise: bool,
        scale: Option<Vec<f32>>,
        release: Release<'g>,
    },
    Values(Vec<f32>),
}

/// Gives back the pages of a filter once it is packed.
#[derive(Clone, Copy)]
struct Release<'g>(Option<&'g dyn PageRelease>);

impl std::fmt::Debug for Release<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Release" } else { "None" })
    }
}

impl ConstSource for Source<'_> {
    fn scaled_rows(&self) -> Option<(&[f32], Option<&[f32]>)> {
        match self {
            // A 1×1 filter `[cout, gin, 1, 1]` is already `[cout, 1, 1, gin]`.
            Source::Filter {
                w,
                taps: 1,
                depthwise: false,
                scale,
                ..
            } => Some((w, scale.as_deref())),
            _ => None,
        }
    }
    fn done(&self) {
        if let Source::Filter {
            w,
            release: Release(Some(r)),
            ..
        } = self
        {
            r.release(bytemuck::cast_slice(w));
        }
    }
    fn values(&self) -> Result<Vec<f32>, KernelError> {
        match self {
            Source::Values(v) => Ok(v.clone()),
            &Source::Filter {
                w,
                cout,
                gin,
                taps,
                depthwise,
                ref scale,
                ..
            } => {
                let n = cout
                    .checked_mul(gin)
                    .and_then(|v| v.checked_mul(taps))
                    .filter(|&n| n <= w.len())
                    .ok_or_else(|| KernelError::invalid("filter shorter than its shape"))?;
                let mut out = vec![0.0f32; n];
                for o in 0..cout {
                    let s = scale.as_ref().map_or(1.0, |s| s[o]);
                    if taps == 1 && !depthwise {
                        // [cout, gin, 1, 1] is already [cout, 1, 1, gin].
                        let (src, dst) = (&w[o * gin..][..gin], &mut out[o * gin..][..gin]);
                        for (d, &v) in dst.iter_mut().zip(src) {
                            *d = v * s;
                        }
                        continue;
                    }
                    for i in 0..gin {
                        let src = &w[(o * gin + i) * taps..][..taps];
                        for (t, &v) in src.iter().enumerate() {
                            let at = if depthwise {
                                t * cout + o
                            } else {
                                (o * taps + t) * gin + i
                            };
                            out[at] = v * s;
                        }
                    }
                }
                Ok(out)
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum VKind {
    Internal,
    Input(u32),
    Output(u32),
    Source(usize),
}

/// A region being built: the engine graph so far and where each portable value lives in it.
#[derive(Default)]
struct Builder<'g> {
    values: Vec<(Shape, VKind)>,
    nodes: Vec<Node>,
    names: Vec<&'static str>,
    sources: Vec<Source<'g>>,
    /// Portable 4-d value → engine value holding it channels-last.
    nhwc: HashMap<usize, usize>,
    /// Portable values the region computes, with the engine value and the portable shape.
    produced: Vec<(usize, usize, Shape)>,
    /// Portable values the region reads from outside.
    inputs: Vec<usize>,
    convs: usize,
}

/// A float32 tensor of rank `rank`, contiguous, of fixed shape, that is not a constant.
fn activation<'g>(g: &CallGraph<'g, '_>, v: usize, rank: usize) -> Option<&'g TensorInfo> {
    match g.value(v)? {
        PValue::Tensor(t)
            if t.info.dtype() == ScalarType::Float
                && t.info.rank() == rank
                && t.info.is_contiguous()
                && t.dynamism == Dynamism::Static
                && !g.is_constant(v) =>
        {
            Some(&t.info)
        }
        _ => None,
    }
}

fn dims4(t: &TensorInfo) -> [usize; 4] {
    [t.size(0), t.size(1), t.size(2), t.size(3)]
}

impl<'g> Builder<'g> {
    /// Takes calls from `start` while they are ones the region can run; returns where it ends.
    fn scan(&mut self, g: &CallGraph<'g, '_>, start: usize) -> usize {
        let mut k = start;
        while k < g.len() && (k == start || g.follows(k - 1)) {
            let Some(c) = g.call(k) else { break };
            let took = match c.op_name() {
                CONVOLUTION => self.conv(g, k, &c),
                "aten::add.out" => self.binary(g, k, &c, BinaryOp::Add),
                "aten::sub.out" => self.binary(g, k, &c, BinaryOp::Sub),
                "aten::mul.out" => self.binary(g, k, &c, BinaryOp::Mul),
                MEAN => self.mean(g, k, &c),
                "aten::avg_pool2d.out" => self.avg_pool(g, k, &c),
                "aten::relu.out" | "aten::hardtanh.out" | "aten::clamp.out" => self.clamp(g, k, &c),
                _ => None,
            };
            match took {
                Some(n) => k += n,
                None => break,
            }
        }
        k
    }

    fn value(&mut self, dims: &[usize], kind: VKind) -> Option<usize> {
        self.values.push((Shape::new(dims).ok()?, kind));
        Some(self.values.len() - 1)
    }

    fn node(&mut self, node: Node, name: &'static str) {
        self.nodes.push(node);
        self.names.push(name);
    }

    /// The engine value of call `c`'s first argument, if the region computed it.
    fn computed_input(&self, c: &PrepareContext<'g, '_>) -> Option<usize> {
        self.nhwc.get(&c.value_index(0).ok()?).copied()
    }

    /// Whether portable value `v` can be read by the region as a 4-d tensor.
    fn readable(&self, g: &CallGraph<'g, '_>, v: usize) -> bool {
        self.nhwc.contains_key(&v) || activation(g, v, 4).is_some()
    }

    /// The engine value holding portable value `v` channels-last: a value the region computed,
    /// or a new input transposed on entry. Call after [`Self::readable`] said yes.
    fn read(&mut self, g: &CallGraph<'g, '_>, v: usize) -> Option<usize> {
        if let Some(&x) = self.nhwc.get(&v) {
            return Some(x);
        }
        let [n, c, h, w] = dims4(activation(g, v, 4)?);
        let ext = self.value(&[n, c, h, w], VKind::Input(self.inputs.len() as u32))?;
        let x = self.value(&[n, h, w, c], VKind::Internal)?;
        self.node(
            Node::Transpose {
                perm: Shape::new(&NCHW_TO_NHWC).ok()?,
                x: ext,
                out: x,
            },
            "XNNStaticTranspose",
        );
        self.inputs.push(v);
        self.nhwc.insert(v, x);
        Some(x)
    }

    /// Records that the region computed portable value `v` (shape `dims`) into engine value `x`.
    fn wrote(&mut self, v: usize, x: usize, dims: &[usize], four_d: bool) -> Option<()> {
        self.produced.push((v, x, Shape::new(dims).ok()?));
        if four_d {
            self.nhwc.insert(v, x);
        }
        Some(())
    }

    /// A clamp fused from the call after `c`, if it is the sole reader of `c`'s output:
    /// (clamp, its call count, the last call's output value).
    fn fused_clamp(
        g: &CallGraph<'g, '_>,
        c: &PrepareContext<'g, '_>,
        k: usize,
    ) -> (Clamp, usize, Option<usize>) {
        match c.consumer().as_ref().and_then(clamp_of) {
            Some(cl) => (Some(cl), 1, g.output(k + 1)),
            None => (None, 0, g.output(k)),
        }
    }

    fn conv(
        &mut self,
        g: &CallGraph<'g, '_>,
        k: usize,
        c: &PrepareContext<'g, '_>,
    ) -> Option<usize> {
        let xv = c.value_index(0).ok()?;
        let xi = activation(g, xv, 4)?;
        let [n, cin, ih, iw] = dims4(xi);
        let wt = c.constant_in_place(1)?;
        if wt.info.dtype() != ScalarType::Float || wt.info.rank() != 4 || !wt.info.is_contiguous() {
            return None;
        }
        let w = wt.as_slice::<f32>().ok()?;
        let [cout, gin, kh, kw] = dims4(wt.info);
        let groups = usize::try_from(c.int(8).ok()?).ok()?;
        if c.bool(6).ok()?
            || groups == 0
            || gin.checked_mul(groups) != Some(cin)
            || cout % groups != 0
            || kh == 0
            || kw == 0
        {
            return None;
        }
        let ((sh, sw), (ph, pw), (dh, dw)) = (pair(c, 3)?, pair(c, 4)?, pair(c, 5)?);
        if [sh, sw, dh, dw].contains(&0) || [sh, sw, ph, pw, dh, dw].iter().any(|&v| v > 1 << 20) {
            return None;
        }
        let win = Window {
            pad_top: ph,
            pad_right: pw,
            pad_bottom: ph,
            pad_left: pw,
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
        };
        let out = activation(g, c.value_index(9).ok()?, 4)?;
        let (oh, ow) = win.out_hw(ih, iw).ok()?;
        // PyTorch's output size must be the engine's (and the window must fit).
        if dims4(out) != [n, cout, oh, ow]
            || ih + 2 * ph < dh * (kh - 1) + 1
            || iw + 2 * pw < dw * (kw - 1) + 1
        {
            return None;
        }
        let mut bias = vec![0.0f32; cout];
        if !c.is_none(2).ok()? {
            let b = c.constant(2)?;
            let b = b.as_slice::<f32>().ok()?;
            if b.len() != cout {
                return None;
            }
            bias.copy_from_slice(b);
        }
        // A following batch norm folds into the filter and bias; a clamp after it (or right
        // after the convolution) into the output.
        let mut used = 1;
        let mut scale = None;
        let mut last = *c;
        if let Some(bn) = c.consumer() {
            if let Some((sc, shift)) = batch_norm_of(&bn, cout) {
                for o in 0..cout {
                    bias[o] = bias[o] * sc[o] + shift[o];
                }
                scale = Some(sc);
                used += 1;
                last = bn;
            }
        }
        let (clamp, more, out_v) = Self::fused_clamp(g, &last, k + used - 1);
        used += more;
        let out_v = out_v?;
        if !self.readable(g, xv) {
            return None;
        }
        let x = self.read(g, xv)?;
        let depthwise = gin == 1 && groups == cin;
        let conv = Conv {
            kind: if depthwise {
                ConvKind::Depthwise
            } else {
                ConvKind::Conv
            },
            win,
            groups,
            group_in: gin,
            group_out: cout / groups,
            adjustment: (0, 0),
        };
        let wdims = if depthwise {
            [1, kh, kw, cout]
        } else {
            [cout, kh, kw, gin]
        };
        self.sources.push(Source::Filter {
            w,
            cout,
            gin,
            taps: kh * kw,
            depthwise,
            scale,
            release: Release(g.page_release()),
        });
        let wv = self.value(&wdims, VKind::Source(self.sources.len() - 1))?;
        self.sources.push(Source::Values(bias));
        let bv = self.value(&[cout], VKind::Source(self.sources.len() - 1))?;
        let o = self.value(&[n, oh, ow, cout], VKind::Internal)?;
        self.node(
            Node::Conv {
                conv,
                x,
                w: wv,
                bias: Some(bv),
                out: o,
                clamp,
            },
            if depthwise {
                "XNNDepthwiseConv2d"
            } else {
                "XNNConv2d"
            },
        );
        self.wrote(out_v, o, &[n, cout, oh, ow], true)?;
        self.convs += 1;
        Some(used)
    }

    /// `add` / `sub` (alpha 1) and `mul` of two 4-d tensors that broadcast (NumPy rules, the
    /// same in either layout), with a following clamp.
    fn binary(
        &mut self,
        g: &CallGraph<'g, '_>,
        k: usize,
        c: &PrepareContext<'g, '_>,
        op: BinaryOp,
    ) -> Option<usize> {
        let (av, bv) = (c.value_index(0).ok()?, c.value_index(1).ok()?);
        let out_at = if op == BinaryOp::Mul { 2 } else { 3 };
        if op != BinaryOp::Mul && c.scalar(2).ok()?.to_f64() != 1.0 {
            return None;
        }
        let dims = dims4(activation(g, c.value_index(out_at).ok()?, 4)?);
        let shape_of = |v: usize| match g.value(v) {
            Some(PValue::Tensor(t)) if t.info.rank() == 4 => Some(dims4(&t.info)),
            _ => None,
        };
        let (da, db) = (shape_of(av)?, shape_of(bv)?);
        let broadcasts = (0..4).all(|i| {
            let (x, y) = (da[i], db[i]);
            (x == y || x == 1 || y == 1) && dims[i] == x.max(y)
        });
        if !broadcasts
            || !self.readable(g, av)
            || !self.readable(g, bv)
            // Only inside a region: an operation alone is not worth two transposes.
            || !(self.nhwc.contains_key(&av) || self.nhwc.contains_key(&bv))
        {
            return None;
        }
        let (clamp, more, out_v) = Self::fused_clamp(g, c, k);
        let out_v = out_v?;
        let (a, b) = (self.read(g, av)?, self.read(g, bv)?);
        let [n, ch, h, w] = dims;
        let o = self.value(&[n, h, w, ch], VKind::Internal)?;
        let name = match op {
            BinaryOp::Add => "XNNAdd",
            BinaryOp::Sub => "XNNSubtract",
            _ => "XNNMultiply2",
        };
        self.node(
            Node::Binary {
                op,
                a,
                b,
                out: o,
                clamp,
            },
            name,
        );
        self.wrote(out_v, o, &dims, true)?;
        Some(1 + more)
    }

    fn clamp(
        &mut self,
        g: &CallGraph<'g, '_>,
        k: usize,
        c: &PrepareContext<'g, '_>,
    ) -> Option<usize> {
        let x = self.computed_input(c)?;
        let (lo, hi) = clamp_of(c)?;
        let ov = g.output(k)?;
        let [n, ch, h, w] = dims4(activation(g, ov, 4)?);
        if self.values[x].0.dims() != [n, h, w, ch] {
            return None;
        }
        let o = self.value(&[n, h, w, ch], VKind::Internal)?;
        self.node(
            Node::Unary {
                op: UnaryOp::Clamp(lo, hi),
                x,
                out: o,
            },
            "XNNClamp",
        );
        self.wrote(ov, o, &[n, ch, h, w], true)?;
        Some(1)
    }

    /// `avg_pool2d` without padding (so that the divisor, the window size, is the same
    /// whether padding counts or not), floor mode, no divisor override, with a following clamp.
    fn avg_pool(
        &mut self,
        g: &CallGraph<'g, '_>,
        k: usize,
        c: &PrepareContext<'g, '_>,
    ) -> Option<usize> {
        let x = self.computed_input(c)?;
        let &[n, ih, iw, ch] = self.values[x].0.dims() else {
            return None;
        };
        let (kh, kw) = pair(c, 1)?;
        let (sh, sw) = if c.int_list(2).ok()?.is_empty() {
            (kh, kw)
        } else {
            pair(c, 2)?
        };
        if pair(c, 3)? != (0, 0) || c.bool(4).ok()? || !c.is_none(6).ok()? {
            return None;
        }
        if [kh, kw, sh, sw].contains(&0) || kh > ih || kw > iw {
            return None;
        }
        let win = Window {
            kh,
            kw,
            sh,
            sw,
            dh: 1,
            dw: 1,
            ..Window::default()
        };
        let (oh, ow) = win.out_hw(ih, iw).ok()?;
        let out = activation(g, c.value_index(7).ok()?, 4)?;
        if dims4(out) != [n, ch, oh, ow] {
            return None;
        }
        let (clamp, more, out_v) = Self::fused_clamp(g, c, k);
        let out_v = out_v?;
        let o = self.value(&[n, oh, ow, ch], VKind::Internal)?;
        self.node(
            Node::Pool {
                kind: PoolKind::Avg,
                win,
                x,
                out: o,
                clamp,
            },
            "XNNAvgPooling2d",
        );
        self.wrote(out_v, o, &[n, ch, oh, ow], true)?;
        Some(1 + more)
    }

    /// `mean` over dims 2 and 3 of a value the region computed, as a global average pool.
    fn mean(
        &mut self,
        g: &CallGraph<'g, '_>,
        k: usize,
        c: &PrepareContext<'g, '_>,
    ) -> Option<usize> {
        let x = self.computed_input(c)?;
        let &[n, h, w, ch] = self.values[x].0.dims() else {
            return None;
        };
        let dims = c.opt_int_list(1).ok()??;
        let mut seen = [false; 4];
        for d in dims.iter() {
            let d = d.ok()?;
            let d = usize::try_from(if d < 0 { d + 4 } else { d }).ok()?;
            *seen.get_mut(d)? = true;
        }
        let keep = c.bool(2).ok()?;
        if seen != [false, false, true, true] || !c.is_none(3).ok()? {
            return None;
        }
        let ov = g.output(k)?;
        let want: &[usize] = if keep { &[n, ch, 1, 1] } else { &[n, ch] };
        let out = activation(g, ov, want.len())?;
        if (0..want.len()).any(|i| out.size(i) != want[i]) || h == 0 || w == 0 {
            return None;
        }
        let o = self.value(&[n, 1, 1, ch], VKind::Internal)?;
        self.node(
            Node::GlobalAvgPool {
                x,
                out: o,
                keep_dims: true,
                clamp: None,
            },
            "XNNGlobalAvgPooling2d",
        );
        self.wrote(ov, o, want, keep)?;
        Some(1)
    }

    /// The region over calls `range`: outputs for every computed value read after it, the
    /// engine prepared over the graph.
    fn finish<'p>(
        mut self,
        g: &CallGraph<'g, 'p>,
        range: Range<usize>,
        options: &EngineOptions,
    ) -> Result<Region<'p>, KernelError> {
        let bad = || KernelError::unsupported("region shape");
        let mut outputs = Vec::new();
        let produced = std::mem::take(&mut self.produced);
        let needed = g.needed_outputs(&range)?;
        if let Some(v) = needed.iter().find(|v| !produced.iter().any(|p| p.0 == **v)) {
            return Err(KernelError::unsupported(format!(
                "value {v} is read after the region but the region does not compute it"
            )));
        }
        for (v, x, shape) in produced {
            if !needed.contains(&v) {
                continue;
            }
            let ext = (self.inputs.len() + outputs.len()) as u32;
            let o = self
                .value(shape.dims(), VKind::Output(ext))
                .ok_or_else(bad)?;
            let spatial = self.values[x].0.dims()[1..3] == [1, 1];
            let node = if shape.rank() == 4 && !spatial {
                Node::Transpose {
                    perm: Shape::new(&NHWC_TO_NCHW)?,
                    x,
                    out: o,
                }
            } else {
                // One pixel: channels-first and channels-last are the same bytes.
                Node::Reshape {
                    new_shape: shape,
                    x,
                    out: o,
                }
            };
            let name = if matches!(node, Node::Transpose { .. }) {
                "XNNStaticTranspose"
            } else {
                "XNNStaticReshape"
            };
            self.node(node, name);
            outputs.push(v);
        }
        if outputs.is_empty() {
            return Err(KernelError::unsupported("region without outputs"));
        }
        let sources = &self.sources;
        let values = self
            .values
            .iter()
            .map(|&(shape, kind)| Value {
                dtype: DType::F32,
                shape,
                kind: match kind {
                    VKind::Internal => Kind::Internal,
                    VKind::Input(e) => Kind::Input(e),
                    VKind::Output(e) => Kind::Output(e),
                    VKind::Source(i) => Kind::Computed(&sources[i]),
                },
            })
            .collect::<Vec<_>>();
        let ext = |want_input: bool| -> Vec<(u32, usize)> {
            values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| match v.kind {
                    Kind::Input(e) if want_input => Some((e, i)),
                    Kind::Output(e) if !want_input => Some((e, i)),
                    _ => None,
                })
                .collect()
        };
        let graph = Graph {
            inputs: ext(true),
            outputs: ext(false),
            values,
            nodes: self.nodes,
            node_names: self.names,
            scales: Vec::new(),
        };
        let handle = Executable::new(graph, MAX_REGION_BYTES, g.num_threads(), options)?;
        Ok(Region {
            calls: range,
            inputs: self.inputs,
            outputs,
            handle: Box::new(handle),
        })
    }
}
