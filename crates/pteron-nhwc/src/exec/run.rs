//! Running the steps: operands resolved to arena slots, constants or method tensors read
//! and written in place, each step on its float32 kernel (int8 ones in [`crate::quant`]),
//! and the copies of external values in and out of the arena.

use pteron_core::{ArgAccess, KernelContext, KernelError, Parallel, ScalarType, TensorRef};
use std::time::{Duration, Instant};

use super::fuse::chain_at;
use super::nodes::run_node;
use super::{invalid, Executable, Fuse, Home, Prep};
use crate::graph::{DType, Node};
use crate::kernels;
use crate::kernels::gemm::AddInto;
use crate::quant::exec as qexec;
use crate::util::{f32s, f32s_mut, io, round_to_f16, Dst, Src, MAX_DIMS};

impl Executable {
    /// One run over a `DelegateCall`'s arguments (`DelegateHandle::execute`).
    pub(super) fn run(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        // New input shapes: propagate and, when they grow, re-plan.
        let mut changed = false;
        for k in 0..self.inputs.len() {
            let (ext, v) = self.inputs[k];
            let t = ctx.tensor(ext as usize)?;
            if t.dtype() != scalar_type(self.dtypes[v]) {
                return Err(KernelError::dtype(t.dtype(), "XNNPACK delegate input"));
            }
            let s = Self::arg_shape(t)?;
            if s != self.shapes[v] {
                self.shapes[v] = s;
                changed = true;
            }
        }
        if changed {
            self.propagate()?;
            if (0..self.homes.len())
                .any(|v| self.homes[v] == Home::Arena && self.sizes[v] > self.capacity[v])
            {
                self.plan()?;
            }
            // Scratch for the new spatial sizes.
            self.plan_scratch()?;
        }
        // Outputs take their shapes now: those written in place are borrowed at that size.
        for k in 0..self.outputs.len() {
            let (ext, v) = self.outputs[k];
            let info = *ctx.tensor(ext as usize)?;
            let s = self.shapes[v];
            if s.rank() == info.rank() {
                let mut sizes = [0usize; MAX_DIMS];
                for (j, &o) in info.dim_order().iter().enumerate() {
                    sizes[o as usize] = s.dims()[j];
                }
                ctx.resize(ext as usize, &sizes[..s.rank()])?;
            } else if s.numel() != Some(info.numel()) {
                // A scalar declared as [1] keeps the tensor's rank; anything else is an error.
                return Err(KernelError::shape(format!(
                    "output {ext} of shape {:?} does not fit the tensor's {:?}",
                    s.dims(),
                    info.sizes()
                )));
            }
        }
        // External values used in place (no copy): same bytes as the arena copy would hold,
        // element-aligned; the rest are copied in here and out at the end.
        self.ext_in.fill(None);
        for k in 0..self.inputs.len() {
            let (ext, v) = self.inputs[k];
            let ([t], []) = ctx.io([ext as usize], [])?;
            let d = self.dtypes[v];
            if self.may_use_in_place[v] && in_place_form(d, t.bytes, self.sizes[v]) {
                self.ext_in[v] = Some(ext);
                continue;
            }
            self.ext_in[v] = None;
            let r = self.dst(v);
            let dst = self
                .arena
                .bytes_mut()
                .get_mut(r)
                .ok_or_else(|| invalid("input outside the arena"))?;
            copy_in(d, t.bytes, dst)?;
        }
        for k in 0..self.outputs.len() {
            let (ext, v) = self.outputs[k];
            let ([], [t]) = ctx.io([], [ext as usize])?;
            let ok =
                self.may_use_in_place[v] && in_place_form(self.dtypes[v], t.bytes, self.sizes[v]);
            self.ext_out[v] = ok.then_some(ext);
        }
        // A reshape of an input read in place is that input too (not when the reshape's
        // output is an external output: those are written or copied out).
        for i in 0..self.steps.len() {
            if let Node::Reshape { x, out, .. } = self.steps[i].node {
                let internal = !self.outputs.iter().any(|&(_, o)| o == out);
                if internal && self.ext_in[x].is_some() {
                    self.ext_in[out] = self.ext_in[x];
                }
            }
        }
        let par = ctx.parallel();
        if let Some(p) = &mut self.profile {
            p.times.fill((Duration::ZERO, false));
        }
        for i in 0..self.steps.len() {
            if self.steps[i].fuse == Fuse::IntoNext {
                continue;
            }
            let t0 = self.profile.as_ref().map(|_| Instant::now());
            self.run_step_with(ctx, i, par).map_err(|e| match e {
                KernelError::Invalid(m) => invalid(format!("node {i} ({}): {m}", self.names[i])),
                e => e,
            })?;
            let out = self.steps[i].node.output();
            if self.dtypes[out] == DType::F16 {
                let r = self.dst(out);
                round_to_f16(f32s_mut(&mut self.arena.bytes_mut()[r])?);
            }
            if let (Some(p), Some(t0)) = (&mut self.profile, t0) {
                p.times[i] = (t0.elapsed(), true);
            }
        }
        if let Some(p) = &mut self.profile {
            let (steps, shapes) = (&self.steps, &self.shapes);
            p.sink
                .add_run(p.graph, &p.times, |i| shapes[steps[i].node.output()]);
        }
        for k in 0..self.outputs.len() {
            let (ext, v) = self.outputs[k];
            if self.ext_out[v].is_some() {
                continue;
            }
            let ([], [t]) = ctx.io([], [ext as usize])?;
            let r = self.dst(v);
            let src = self
                .arena
                .bytes()
                .get(r)
                .ok_or_else(|| invalid("output outside the arena"))?;
            copy_out(self.dtypes[v], src, t.bytes)?;
        }
        Ok(())
    }

    fn src(&self, v: usize) -> Src {
        match self.homes[v] {
            Home::Const(k) => Src::Const(k),
            Home::Packed => Src::Arena(0, 0),
            Home::Arena => Src::Arena(self.offsets[v], self.offsets[v] + self.sizes[v]),
        }
    }

    fn dst(&self, v: usize) -> core::ops::Range<usize> {
        self.offsets[v]..self.offsets[v] + self.sizes[v]
    }

    /// Runs node `i`; `ext[k]`, when set, is input k read in place from a method tensor, and
    /// `ext_out` the method tensor the output is written to in place.
    fn run_step(
        &mut self,
        i: usize,
        par: &dyn Parallel,
        ext: [Option<&[u8]>; 5],
        ext_out: Option<&mut [u8]>,
    ) -> Result<(), KernelError> {
        let st = &self.steps[i];
        let out = st.node.output();
        if let Node::Reshape { x, .. } = st.node {
            let in_arena = ext[0].is_none() && ext_out.is_none();
            if in_arena && self.homes[x] == Home::Arena && self.offsets[x] == self.offsets[out] {
                // The planner handed x's bytes to the reshape's output: nothing to move.
                return Ok(());
            }
        }
        let os = self.shapes[out];
        let dst = self.dst(out);
        let chain = match st.fuse {
            Fuse::Chain { .. } => Some(
                chain_at(&self.steps, i)
                    .ok_or_else(|| invalid("fused step without its convolutions"))?,
            ),
            _ => None,
        };
        // A step that runs the convolution before it and its add: the convolution, its input,
        // and the slot of the add's operand that the convolution wrote (the other is the
        // residual).
        let conv_add = match st.fuse {
            Fuse::ConvAdd => match (&self.steps[i - 1].prep, &self.steps[i - 1].node) {
                (Prep::Conv(cw), &Node::Conv { x, out: c, .. }) => Some((Some(cw), x, c)),
                _ => return Err(invalid("fused add without its convolution")),
            },
            Fuse::Chain { add: true, .. } => {
                let (_, x) = chain.ok_or_else(|| invalid("fused add without its chain"))?;
                Some((None, x, self.steps[i - 1].node.output()))
            }
            _ => None,
        };
        let (ins, n) = st.node.inputs();
        let conv_slot = match conv_add {
            Some((_, _, c)) => usize::from(ins[0] != c),
            None => 0,
        };
        let srcs = {
            let mut s = [Src::Arena(0, 0); 5];
            for k in 0..n {
                s[k] = self.src(ins[k]);
            }
            // A fused step reads its first convolution's input in the convolution's slot.
            if let Some(x) = chain.map(|(_, x)| x).or(conv_add.map(|(_, x, _)| x)) {
                s[conv_slot] = self.src(x);
            }
            s
        };
        let shapes = &self.shapes;
        let dst = match ext_out {
            Some(o) => Dst::Ext(o),
            None => Dst::Arena(dst),
        };
        let ([a, b, c, d, e], o) = io(self.arena.bytes_mut(), &self.consts, srcs, ext, dst)?;
        if let Prep::Q(q) = &st.prep {
            return qexec::run(
                q,
                &st.node,
                par,
                shapes,
                &self.dtypes,
                [a, b, c, d, e],
                o,
                &os,
                &mut self.qscratch,
            );
        }
        let o = f32s_mut(o)?;
        // With an add: the convolution's input, and the residual with the add's clamp.
        let (a, add) = match (conv_add, &st.node) {
            (Some(_), &Node::Binary { clamp, .. }) => {
                let (x, r) = if conv_slot == 0 { (a, b) } else { (b, a) };
                // Both operands as the output (new input shapes could make one broadcast,
                // and the convolution would then run at the output's size).
                if shapes[ins[0]] != os || shapes[ins[1]] != os {
                    return Err(KernelError::unsupported(
                        "a residual add fused into its convolution changed shape",
                    ));
                }
                let r = f32s(r)?;
                (x, Some(AddInto { r, clamp }))
            }
            (Some(_), _) => return Err(invalid("fused add without its add")),
            _ => (a, None),
        };
        // A convolution on its own, or with the add after it.
        let conv = match (conv_add, &st.node, &st.prep) {
            (Some((Some(cw), x, _)), _, _) => Some((cw, x)),
            (None, &Node::Conv { x, .. }, Prep::Conv(cw)) if chain.is_none() => Some((cw, x)),
            _ => None,
        };
        if let Some((cw, x)) = conv {
            let xs = shapes[x].dims();
            return cw.run(
                par,
                f32s(a)?,
                xs[0],
                xs[1],
                xs[2],
                o,
                os.dims()[1],
                os.dims()[2],
                &mut self.scratch,
                add,
            );
        }
        if let Some((mut chain, x)) = chain {
            let xs = shapes[x].dims();
            chain.add = add;
            return kernels::fused::run(
                par,
                chain,
                f32s(a)?,
                [xs[0], xs[1], xs[2]],
                o,
                [os.dims()[1], os.dims()[2]],
                &mut self.fused_scratch,
                kernels::fused::STRIPE_FLOATS,
            );
        }
        run_node(par, &st.node, &st.prep, shapes, [a, b, c, d, e], o, os)
    }

    /// Runs node `i`, borrowing from the method the operands and output used in place.
    fn run_step_with(
        &mut self,
        ctx: &mut KernelContext<'_, '_>,
        i: usize,
        par: &dyn Parallel,
    ) -> Result<(), KernelError> {
        if let Node::Reshape { out, .. } = self.steps[i].node {
            if self.ext_in[out].is_some() {
                // Its output is the method tensor its input is: nothing to move.
                return Ok(());
            }
        }
        let (ins, n) = self.steps[i].node.inputs();
        // Method arguments per operand (unused slots repeat the first one: inputs may be
        // borrowed more than once).
        let mut args = [usize::MAX; 5];
        let mut first = usize::MAX;
        for k in 0..n {
            if let Some(e) = self.ext_in[ins[k]] {
                args[k] = e as usize;
                if first == usize::MAX {
                    first = e as usize;
                }
            }
        }
        let out = self.ext_out[self.steps[i].node.output()].map(|e| e as usize);
        if first == usize::MAX {
            return match out {
                None => self.run_step(i, par, [None; 5], None),
                Some(o) => {
                    let ([], [t]) = ctx.io([], [o])?;
                    self.run_step(i, par, [None; 5], Some(t.bytes))
                }
            };
        }
        let used = args.map(|a| a != usize::MAX);
        let borrow = args.map(|a| if a == usize::MAX { first } else { a });
        fn pick<'t>(ts: &[TensorRef<'t>; 5], used: [bool; 5]) -> [Option<&'t [u8]>; 5] {
            core::array::from_fn(|k| used[k].then_some(ts[k].bytes))
        }
        match out {
            None => {
                let (ts, []) = ctx.io(borrow, [])?;
                self.run_step(i, par, pick(&ts, used), None)
            }
            Some(o) => {
                let (ts, [t]) = ctx.io(borrow, [o])?;
                self.run_step(i, par, pick(&ts, used), Some(t.bytes))
            }
        }
    }
}
/// The tensor dtype of a delegate argument of graph datatype `d`.
pub(super) fn scalar_type(d: DType) -> ScalarType {
    match d {
        DType::F16 => ScalarType::Half,
        // Quantized constants the exporter leaves outside the delegate arrive as int8 / uint8.
        DType::QS8 { .. } => ScalarType::Char,
        DType::QU8 { .. } => ScalarType::Byte,
        // Other external values are float32 (checked at init).
        _ => ScalarType::Float,
    }
}

/// Whether a method tensor's bytes can stand in for a value's arena slot: a dtype the
/// delegate keeps as is (half is widened), the value's exact size, element-aligned.
fn in_place_form(d: DType, bytes: &[u8], size: usize) -> bool {
    let align = match d {
        DType::F32 => 4,
        DType::QS8 { .. } | DType::QU8 { .. } => 1,
        _ => return false,
    };
    bytes.len() == size && (bytes.as_ptr() as usize).is_multiple_of(align)
}

/// Copies an input tensor's bytes into its arena slot (half widened to f32).
fn copy_in(d: DType, src: &[u8], dst: &mut [u8]) -> Result<(), KernelError> {
    match d {
        DType::F32 | DType::QS8 { .. } | DType::QU8 { .. } => {
            let src = src
                .get(..dst.len())
                .ok_or_else(|| invalid("input tensor too short"))?;
            dst.copy_from_slice(src);
        }
        DType::F16 => {
            let dst = f32s_mut(dst)?;
            let src = src
                .get(..dst.len() * 2)
                .ok_or_else(|| invalid("input tensor too short"))?;
            for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        d => return Err(invalid(format!("external value of datatype {d:?}"))),
    }
    Ok(())
}

/// Copies an arena slot into an output tensor's bytes (f32 narrowed to half).
fn copy_out(d: DType, src: &[u8], dst: &mut [u8]) -> Result<(), KernelError> {
    match d {
        DType::F32 | DType::QS8 { .. } | DType::QU8 { .. } => dst
            .get_mut(..src.len())
            .ok_or_else(|| invalid("output tensor too short"))?
            .copy_from_slice(src),
        DType::F16 => {
            let src = f32s(src)?;
            let dst = dst
                .get_mut(..src.len() * 2)
                .ok_or_else(|| invalid("output tensor too short"))?;
            for (c, &v) in dst.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            }
        }
        d => return Err(invalid(format!("external value of datatype {d:?}"))),
    }
    Ok(())
}
