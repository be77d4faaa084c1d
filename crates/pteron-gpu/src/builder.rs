//! A GPU region being built: homes for its tensors in one device buffer (word offsets), the
//! constants to upload, the region's inputs, and its steps. A first pass gives every value
//! words of its own and records when each is used; `plan` then lets values whose lifetimes do
//! not overlap share words, and a second pass lowers the same calls at those offsets.

use std::collections::HashMap;

use pteron_core::{
    ArgAccess, CallGraph, Dynamism, PrepareContext, ScalarType, Storage, TensorInfo, Value,
};

use crate::emit::Steps;
use crate::kernels::Kernel;
use crate::words::{place, Slot, Step, RESERVED_WORDS};

/// A region being built.
#[derive(Default)]
pub(crate) struct Builder<'g> {
    /// The region's first call, and the call being lowered.
    pub(crate) start: usize,
    pub(crate) current: usize,
    pub(crate) words: u64,
    pub(crate) steps: Vec<Step>,
    /// Constants to upload at load: where, what.
    pub(crate) consts: Vec<(Slot, &'g [u8])>,
    const_of: HashMap<usize, Slot>,
    /// Values the region reads from outside, in order.
    pub(crate) inputs: Vec<(usize, Slot)>,
    /// Values the region computes.
    pub(crate) produced: HashMap<usize, Slot>,
    /// The first and last call that touches each non-constant value (first pass).
    life: HashMap<usize, (usize, usize)>,
    /// The offsets of a second pass.
    plan: Option<Plan>,
    produced_order: Vec<usize>,
}

/// What to undo when a call turns out not to lower half-way.
pub(crate) struct Mark {
    words: u64,
    steps: usize,
    consts: usize,
    inputs: usize,
    produced: usize,
}

/// A float32 tensor of fixed shape in PyTorch's contiguous order.
pub(crate) fn float_tensor<'g>(g: &CallGraph<'g, '_>, v: usize) -> Option<&'g TensorInfo> {
    match g.value(v)? {
        Value::Tensor(t)
            if t.info.dtype() == ScalarType::Float
                && t.info.is_contiguous()
                && t.dynamism == Dynamism::Static =>
        {
            Some(&t.info)
        }
        _ => None,
    }
}

/// The planned bytes of value `v`: (arena, start, end).
fn planned(g: &CallGraph<'_, '_>, v: usize) -> Option<(u32, usize, usize)> {
    match g.value(v)? {
        Value::Tensor(t) => match t.storage {
            Storage::Planned { arena, offset } => {
                Some((arena, offset, offset.checked_add(t.info.nbytes())?))
            }
            _ => None,
        },
        _ => None,
    }
}

impl<'g> Builder<'g> {
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            words: self.words,
            steps: self.steps.len(),
            consts: self.consts.len(),
            inputs: self.inputs.len(),
            produced: self.produced_order.len(),
        }
    }

    pub(crate) fn rollback(&mut self, m: Mark) {
        self.words = m.words;
        self.steps.truncate(m.steps);
        for (slot, _) in self.consts.drain(m.consts..) {
            self.const_of.retain(|_, s| s.off != slot.off);
        }
        self.inputs.truncate(m.inputs);
        for v in self.produced_order.drain(m.produced..) {
            self.produced.remove(&v);
        }
    }

    /// A home for value `v` (`None`: a constant): the planned one on a second pass, else the
    /// next free words.
    fn alloc(&mut self, v: Option<usize>, words: u64) -> Option<Slot> {
        if let (Some(plan), Some(v)) = (&self.plan, v) {
            let &off = plan.offsets.get(&v)?;
            return Some(Slot { off, words });
        }
        let slot = Slot {
            off: self.words,
            words,
        };
        self.words = self.words.checked_add(words)?;
        // Word offsets and indices are u32 in the kernels.
        (self.words <= u64::from(u32::MAX)).then_some(slot)
    }

    /// Records that the call being lowered reads or writes value `v`.
    fn touch(&mut self, v: usize) {
        let k = self.current;
        let e = self.life.entry(v).or_insert((k, k));
        e.0 = e.0.min(k);
        e.1 = e.1.max(k);
    }

    /// Offsets for a second pass over calls `start..end` that reuse the words of values no
    /// longer needed: constants first (never reused), then every other value at the lowest
    /// offset whose words no value alive at the same time holds. `outputs` stay alive to the
    /// end, inputs from the start.
    pub(crate) fn plan(&self, end: usize, outputs: &[usize]) -> Plan {
        let mut words = RESERVED_WORDS + self.consts.iter().map(|(s, _)| s.words).sum::<u64>();
        let consts_end = words;
        let mut values: Vec<(usize, usize, usize, u64)> = Vec::new();
        let sizes = self.inputs.iter().map(|&(v, s)| (v, s.words, true)).chain(
            self.produced_order
                .iter()
                .map(|v| (*v, self.produced[v].words, false)),
        );
        for (v, n, input) in sizes {
            let (mut first, mut last) = self.life.get(&v).copied().unwrap_or((self.start, end));
            if input {
                first = self.start;
            }
            if outputs.contains(&v) {
                last = end;
            }
            values.push((v, first, last, n));
        }
        values.sort_by_key(|&(v, first, _, _)| (first, v));
        let lives: Vec<(usize, usize, u64)> =
            values.iter().map(|&(_, f, l, n)| (f, l, n)).collect();
        let (offs, top) = place(&lives, consts_end);
        let offsets = values
            .iter()
            .zip(offs)
            .map(|(&(v, ..), off)| (v, off))
            .collect();
        words = words.max(top);
        Plan { offsets, words }
    }

    /// Where call `c`'s tensor argument `arg` lives: computed by the region, a constant
    /// (uploaded once), or a region input.
    pub(crate) fn read(
        &mut self,
        g: &CallGraph<'g, '_>,
        c: &PrepareContext<'g, '_>,
        arg: usize,
    ) -> Option<(Slot, &'g TensorInfo)> {
        let v = c.value_index(arg).ok()?;
        let info = float_tensor(g, v)?;
        if g.is_constant(v) {
            if let Some(&s) = self.const_of.get(&v) {
                return Some((s, info));
            }
            let t = c.constant(arg)?;
            let slot = self.alloc(None, info.numel() as u64)?;
            self.consts.push((slot, t.bytes.get(..info.numel() * 4)?));
            self.const_of.insert(v, slot);
            return Some((slot, info));
        }
        self.read_value(g, v)
    }

    /// As [`Self::read`] for a value named by index (a tensor list item): computed by the
    /// region or a region input, not a constant.
    pub(crate) fn read_value(
        &mut self,
        g: &CallGraph<'g, '_>,
        v: usize,
    ) -> Option<(Slot, &'g TensorInfo)> {
        let info = float_tensor(g, v)?;
        if let Some(&s) = self.produced.get(&v) {
            self.touch(v);
            return Some((s, info));
        }
        if g.is_constant(v) {
            return None;
        }
        if let Some(&(_, s)) = self.inputs.iter().find(|(i, _)| *i == v) {
            self.touch(v);
            return Some((s, info));
        }
        // A view the exporter planned over a value this region computed (no instruction
        // writes it) is that value when it covers the same bytes (a reshape); a view of part
        // of it shows bytes that exist only on the device: that call stays on the CPU, after
        // the region has written the value back.
        if let Some(x) = g.alias_base(v, self.start..self.current) {
            let s = *self.produced.get(&x)?;
            self.touch(x);
            return Some((s, info));
        }
        if let Some(range) = planned(g, v) {
            let overlaps = self
                .produced_order
                .iter()
                .filter_map(|&p| planned(g, p))
                .any(|o| o.0 == range.0 && o.1 < range.2 && range.1 < o.2);
            if overlaps {
                return None;
            }
        }
        let slot = self.alloc(Some(v), info.numel() as u64)?;
        self.inputs.push((v, slot));
        self.touch(v);
        Some((slot, info))
    }

    /// A home for the value call `c` writes as argument `arg` (written once per region).
    pub(crate) fn write(
        &mut self,
        g: &CallGraph<'g, '_>,
        c: &PrepareContext<'g, '_>,
        arg: usize,
    ) -> Option<(Slot, &'g TensorInfo)> {
        let v = c.value_index(arg).ok()?;
        let info = float_tensor(g, v)?;
        if g.is_constant(v)
            || self.produced.contains_key(&v)
            || self.inputs.iter().any(|(i, _)| *i == v)
        {
            return None;
        }
        let slot = self.alloc(Some(v), info.numel() as u64)?;
        self.produced.insert(v, slot);
        self.produced_order.push(v);
        self.touch(v);
        Some((slot, info))
    }
}

/// Where each non-constant value of a region lives, reusing words across lifetimes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Plan {
    offsets: HashMap<usize, u64>,
    /// The buffer's words.
    pub(crate) words: u64,
}

impl Builder<'_> {
    /// An empty region (its buffer starts after the reserved words).
    pub(crate) fn new() -> Self {
        Builder {
            words: RESERVED_WORDS,
            ..Builder::default()
        }
    }

    /// An empty region for a second pass with the offsets of `plan`.
    pub(crate) fn with_plan(plan: Plan) -> Self {
        Builder {
            words: RESERVED_WORDS,
            plan: Some(plan),
            ..Builder::default()
        }
    }
}

impl Steps for Builder<'_> {
    fn step(&mut self, kernel: Kernel, params: Vec<u32>, grid: [u32; 3]) {
        self.steps.push(Step {
            kernel,
            params,
            grid,
        });
    }
}
