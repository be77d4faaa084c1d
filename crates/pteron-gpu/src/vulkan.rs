//! ExecuTorch's Vulkan delegate ("VulkanBackend") on the GPU engine.
//!
//! A payload is a "VH00" header (little-endian: magic at bytes 4..8, header length u16 at 8,
//! flatbuffer offset u32 at 10 and size u32 at 14, constant bytes offset u32 at 18 and size
//! u64 at 22) followed by a "VK00" flatbuffer (`vkgraph.VkGraph`: values — tensors, scalars,
//! lists —, a chain of operator calls by name with argument value ids, the graph's input and
//! output ids, constants as byte ranges of the payload or named data) and the constant bytes.
//! Every offset and size is checked before use; every tensor is float32 and contiguous in
//! PyTorch's order here (the payload's storage and layout hints are the C++ runtime's choice of
//! image or buffer, not a change of values). The chain is lowered onto the engine's steps
//! (`emit.rs`); an operator without a lowering is a load error naming it.

use std::collections::HashMap;
use std::sync::Arc;

use pteron_core::{
    ArgView, Backend, BackendInit, DelegateHandle, KernelContext, KernelError, ScalarType,
};

use crate::device::Gpu;
use crate::emit::{self, Steps};
use crate::kernels::Kernel;
use crate::region::{GpuFailure, GpuRegion, SegmentSpec, Transfer};
use crate::words::{place, Dt, Slot, Step, RESERVED_WORDS};

#[allow(
    dead_code,
    unused_imports,
    clippy::all,
    non_camel_case_types,
    non_snake_case,
    mismatched_lifetime_syntaxes,
    unsafe_op_in_unsafe_fn
)]
#[rustfmt::skip]
mod generated {
    include!("generated/vulkan_generated.rs");
}

use generated::vkgraph as fb;

const HEADER_LEN: usize = 30;

fn invalid(m: impl Into<String>) -> KernelError {
    KernelError::invalid(format!("Vulkan payload: {}", m.into()))
}

/// The payload's parts: the flatbuffer and the constant bytes.
fn split(payload: &[u8]) -> Result<(&[u8], &[u8]), KernelError> {
    let head = payload
        .get(..HEADER_LEN)
        .ok_or_else(|| invalid("shorter than its header"))?;
    if &head[4..8] != b"VH00" {
        return Err(invalid("no VH00 header"));
    }
    let u32_at = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let len = u16::from_le_bytes([head[8], head[9]]) as usize;
    if len != HEADER_LEN {
        return Err(invalid(format!("header length {len}")));
    }
    let range = |off: u64, size: u64, what: &str| -> Result<&[u8], KernelError> {
        let end = off
            .checked_add(size)
            .ok_or_else(|| invalid(format!("{what} range overflows")))?;
        let (off, end) = (usize::try_from(off), usize::try_from(end));
        match (off, end) {
            (Ok(o), Ok(e)) => payload
                .get(o..e)
                .ok_or_else(|| invalid(format!("{what} outside the payload"))),
            _ => Err(invalid(format!("{what} outside the payload"))),
        }
    };
    let fb = range(u64::from(u32_at(10)), u64::from(u32_at(14)), "flatbuffer")?;
    let mut size = [0u8; 8];
    size.copy_from_slice(&head[22..HEADER_LEN]);
    let size = u64::from_le_bytes(size);
    let bytes = range(u64::from(u32_at(18)), size, "constant bytes")?;
    Ok((fb, bytes))
}

/// A value of the graph, decoded.
#[derive(Clone, Debug)]
enum Val<'d> {
    None,
    Int(i64),
    Double(f64),
    Bool(bool),
    Ints(Vec<i64>),
    Values(Vec<usize>),
    Str(&'d str),
    Tensor {
        dims: Vec<usize>,
        dt: Dt,
        /// Its bytes among the constants, if it is one.
        constant: Option<&'d [u8]>,
    },
    /// A tensor of another dtype than float32 (the engine has no kernels for them).
    OtherTensor(fb::VkDataType),
    /// A size known only at run time (dynamic shapes), computed by the operator that outputs
    /// it.
    SymInt,
    Other(&'static str),
}

impl Val<'_> {
    /// What the value is, for messages.
    fn describe(&self) -> String {
        match self {
            Val::Other(kind) => kind.to_string(),
            Val::OtherTensor(dtype) => format!("a {dtype:?} tensor"),
            Val::Tensor { dims, .. } => format!("a tensor {dims:?}"),
            v => format!("{v:?}"),
        }
    }
}

/// Most elements one tensor may declare (its bytes must fit the engine's word offsets).
const MAX_ELEMENTS: u64 = u32::MAX as u64;

fn decode<'d>(
    g: &fb::VkGraph<'d>,
    bytes: &'d [u8],
    named: &dyn pteron_core::NamedDataMap<'d>,
) -> Result<Vec<Val<'d>>, KernelError> {
    let constants = g.constants();
    let constant = |id: i32| -> Result<Option<&'d [u8]>, KernelError> {
        if id < 0 {
            return Ok(None);
        }
        let c = match constants {
            Some(list) if (id as usize) < list.len() => list.get(id as usize),
            _ => return Err(invalid(format!("constant {id} out of range"))),
        };
        if let Some(key) = c.named_key().filter(|k| !k.is_empty()) {
            return named
                .get(key)
                .map_err(|e| invalid(format!("named data {key:?}: {e}")))?
                .map(Some)
                .ok_or_else(|| invalid(format!("named data {key:?} missing")));
        }
        let end = c
            .offset()
            .checked_add(c.length())
            .ok_or_else(|| invalid("constant range overflows"))?;
        let (o, e) = (usize::try_from(c.offset()), usize::try_from(end));
        match (o, e) {
            (Ok(o), Ok(e)) => bytes
                .get(o..e)
                .map(Some)
                .ok_or_else(|| invalid(format!("constant {id} outside the constant bytes"))),
            _ => Err(invalid(format!("constant {id} outside the constant bytes"))),
        }
    };
    let mut out = Vec::new();
    for v in g.values().into_iter().flatten() {
        use fb::GraphTypes as T;
        let val = match v.value_type() {
            T::Null => Val::None,
            T::Int => Val::Int(v.value_as_int().map_or(0, |i| i.int_val())),
            T::Double => Val::Double(v.value_as_double().map_or(0.0, |d| d.double_val())),
            T::Bool => Val::Bool(v.value_as_bool().is_some_and(|b| b.bool_val())),
            T::IntList => Val::Ints(
                v.value_as_int_list()
                    .and_then(|l| l.items())
                    .map(|l| l.iter().collect())
                    .unwrap_or_default(),
            ),
            T::ValueList => Val::Values(
                v.value_as_value_list()
                    .and_then(|l| l.items())
                    .map(|l| {
                        l.iter()
                            .map(|i| usize::try_from(i).unwrap_or(usize::MAX))
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            T::String => Val::Str(
                v.value_as_string()
                    .and_then(|s| s.string_val())
                    .unwrap_or(""),
            ),
            T::VkTensor => {
                let t = v
                    .value_as_vk_tensor()
                    .ok_or_else(|| invalid("tensor value without a tensor"))?;
                let dt = match t.datatype() {
                    fb::VkDataType::FLOAT32 => Dt::F32,
                    fb::VkDataType::INT32 => Dt::I32,
                    // A bool constant would need its bytes widened to words.
                    fb::VkDataType::BOOL if t.constant_id() < 0 => Dt::Bool,
                    fb::VkDataType::INT8 if t.constant_id() < 0 => Dt::I8,
                    fb::VkDataType::UINT8 if t.constant_id() >= 0 => Dt::U8,
                    other => {
                        out.push(Val::OtherTensor(other));
                        continue;
                    }
                };
                let dims: Vec<usize> = t
                    .dims()
                    .map(|d| d.iter().map(|x| x as usize).collect())
                    .unwrap_or_default();
                let n = dims
                    .iter()
                    .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
                    .filter(|&n| n <= MAX_ELEMENTS)
                    .ok_or_else(|| invalid(format!("tensor of dims {dims:?} too large")))?;
                let constant = constant(t.constant_id())?;
                let len = if dt == Dt::U8 { n } else { n * 4 };
                if let Some(c) = constant {
                    if (c.len() as u64) < len {
                        return Err(invalid(format!(
                            "constant of {} bytes for a tensor of {n} {dt:?} values",
                            c.len()
                        )));
                    }
                }
                Val::Tensor {
                    dims,
                    dt,
                    constant: constant.map(|c| &c[..len as usize]),
                }
            }
            T::DoubleList => Val::Other("double list"),
            T::BoolList => Val::Other("bool list"),
            T::SymInt => Val::SymInt,
            _ => Val::Other("unknown value"),
        };
        out.push(val);
    }
    Ok(out)
}

/// A value's home in a segment: (value id, segment).
type Key = (usize, usize);

/// The graph being lowered: a home for each tensor value as it is first touched. The chain
/// runs in segments, one device buffer each (a graph larger than the device's largest buffer
/// takes several); a value an operator reads in a later segment than the one that holds it is
/// copied there between the segments' passes.
struct VkBuild<'d> {
    /// Shared with the delegate, which lowers the graph again at every run's sizes.
    vals: Arc<Vec<Val<'d>>>,
    /// Each operator's segment, and each segment's first and last operator.
    seg_of: Vec<usize>,
    bounds: Vec<(usize, usize)>,
    slots: HashMap<Key, Slot>,
    /// The segment where each non-constant value got its first home.
    origin: HashMap<usize, usize>,
    /// Constants an operator writes (attention caches), and their segment.
    written: HashMap<usize, usize>,
    words: Vec<u64>,
    steps: Vec<Vec<Step>>,
    consts: Vec<Vec<(Slot, &'d [u8])>>,
    transfers: Vec<Vec<Transfer>>,
    /// Homes that a later segment or the caller reads: alive to their segment's end.
    kept: std::collections::HashSet<Key>,
    /// The operator being lowered, and the first and last operator touching each
    /// non-constant home (first pass).
    current: usize,
    life: HashMap<Key, (usize, usize)>,
    /// Offsets of non-constant homes (second pass).
    plan: Option<Arc<HashMap<Key, u64>>>,
    /// This run's sizes of tensors whose sizes are not their declared ones (dynamic shapes:
    /// declared sizes are upper bounds), and its symbolic ints.
    now: HashMap<usize, Vec<usize>>,
    syms: HashMap<usize, i64>,
    /// The values of the graph's int inputs at this run (read as sizes).
    host: HashMap<usize, Vec<i64>>,
    /// Whether the graph has symbolic sizes.
    dynamic: bool,
}

/// What a run knows that the graph does not: the sizes of its inputs and the values of its
/// int inputs, by value id.
#[derive(Default)]
struct Env {
    dims: HashMap<usize, Vec<usize>>,
    ints: HashMap<usize, Vec<i64>>,
}

fn numel(d: &[usize]) -> u64 {
    d.iter().map(|&v| v as u64).product()
}

/// The broadcast of two shapes (right-aligned), or `None` where they do not broadcast.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|d| {
            let x = (d + a.len()).checked_sub(r).map_or(1, |i| a[i]);
            let y = (d + b.len()).checked_sub(r).map_or(1, |i| b[i]);
            match (x, y) {
                _ if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

/// The sizes of a view of `n` elements as `sizes` (one may be -1: inferred).
fn view_sizes(sizes: &[i64], n: u64) -> Option<Vec<usize>> {
    let mut known = 1u64;
    let mut infer = None;
    for (k, &s) in sizes.iter().enumerate() {
        match s {
            -1 if infer.is_none() => infer = Some(k),
            s if s >= 0 => known = known.checked_mul(s as u64)?,
            _ => return None,
        }
    }
    let mut out: Vec<usize> = sizes.iter().map(|&s| s.max(0) as usize).collect();
    if let Some(k) = infer {
        if known == 0 || !n.is_multiple_of(known) {
            return None;
        }
        out[k] = usize::try_from(n / known).ok()?;
    }
    Some(out)
}

impl Steps for VkBuild<'_> {
    fn step(&mut self, kernel: Kernel, params: Vec<u32>, grid: [u32; 3]) {
        let s = self.seg();
        self.steps[s].push(Step {
            kernel,
            params,
            grid,
        });
    }
}

/// Why an operator could not be lowered: its name is unsupported, or its arguments are.
enum Refusal {
    Op,
    Args(String),
}

type Lowered = Result<(), Refusal>;

fn bad(m: impl Into<String>) -> Refusal {
    Refusal::Args(m.into())
}

impl<'d> VkBuild<'d> {
    fn val(&self, id: i32) -> Result<&Val<'d>, Refusal> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.vals.get(i))
            .ok_or_else(|| bad(format!("value {id} out of range")))
    }

    /// Float32 tensor `id`: its home and dims; another dtype refuses the operator.
    fn tensor(&mut self, id: i32) -> Result<(Slot, Vec<usize>), Refusal> {
        match self.any_tensor(id)? {
            (s, d, Dt::F32) => Ok((s, d)),
            _ => Err(Refusal::Op),
        }
    }

    /// The segment of the operator being lowered.
    fn seg(&self) -> usize {
        self.seg_of
            .get(self.current)
            .or(self.seg_of.last())
            .copied()
            .unwrap_or(0)
    }

    /// Records that the operator being lowered touches home `key`.
    fn touch(&mut self, key: Key) {
        let k = self.current;
        let e = self.life.entry(key).or_insert((k, k));
        e.0 = e.0.min(k);
        e.1 = e.1.max(k);
    }

    /// The next `n` free words of segment `s`.
    fn bump(&mut self, s: usize, n: u64) -> Result<Slot, Refusal> {
        let off = self.words[s];
        self.words[s] = off
            .checked_add(n)
            .filter(|&w| w <= u64::from(u32::MAX))
            .ok_or_else(|| bad("the graph's tensors exceed the engine's word offsets"))?;
        Ok(Slot { off, words: n })
    }

    /// A home of `n` words for a non-constant: the planned one on a second pass.
    fn home(&mut self, key: Key, n: u64) -> Result<Slot, Refusal> {
        match &self.plan {
            Some(plan) => Ok(Slot {
                off: *plan
                    .get(&key)
                    .ok_or_else(|| bad("a tensor the plan lacks"))?,
                words: n,
            }),
            None => self.bump(key.1, n),
        }
    }

    /// Tensor `id` of any dtype the engine holds: its home in this segment, dims and dtype
    /// (a constant is uploaded into each segment that reads it; a value of an earlier segment
    /// is copied in).
    fn any_tensor(&mut self, id: i32) -> Result<(Slot, Vec<usize>, Dt), Refusal> {
        let (dims, dt, constant) = match self.val(id)? {
            Val::Tensor { dims, dt, constant } => (dims.clone(), *dt, *constant),
            v => return Err(bad(format!("value {id} is {}, not a tensor", v.describe()))),
        };
        let i = id as usize;
        let s = self.seg();
        let declared = numel(&dims);
        let dims = self.now.get(&i).cloned().unwrap_or(dims);
        let n = if dt == Dt::U8 {
            declared.div_ceil(4)
        } else {
            declared
        };
        if constant.is_none() {
            self.touch((i, s));
        } else if self.written.get(&i).is_some_and(|&w| w != s) {
            return Err(bad("a cache that operators in two buffers use"));
        }
        if let Some(&slot) = self.slots.get(&(i, s)) {
            return Ok((slot, dims, dt));
        }
        let slot = match constant {
            Some(bytes) => {
                let slot = self.bump(s, n)?;
                self.consts[s].push((slot, bytes));
                slot
            }
            None => {
                let slot = self.home((i, s), n)?;
                match self.origin.get(&i).copied() {
                    Some(from) if from != s => {
                        let src = *self
                            .slots
                            .get(&(i, from))
                            .ok_or_else(|| bad("a value without its first home"))?;
                        self.transfers[s].push(Transfer {
                            from,
                            src: src.off,
                            dst: slot.off,
                            words: n,
                        });
                        self.kept.insert((i, from));
                        // The copy lands before the segment's first operator.
                        let first = self.bounds[s].0;
                        if let Some(e) = self.life.get_mut(&(i, s)) {
                            e.0 = first;
                        }
                    }
                    Some(_) => {}
                    None => {
                        self.origin.insert(i, s);
                    }
                }
                slot
            }
        };
        self.slots.insert((i, s), slot);
        Ok((slot, dims, dt))
    }

    /// Tensors `x` and `out` of one dtype (the copies move words of any dtype).
    fn same_dtype(
        &mut self,
        x: i32,
        out: i32,
    ) -> Result<((Slot, Vec<usize>), (Slot, Vec<usize>), Dt), Refusal> {
        let (xs, xd, xt) = self.any_tensor(x)?;
        let (os, od, ot) = self.any_tensor(out)?;
        if xt != ot {
            return Err(Refusal::Op);
        }
        Ok(((xs, xd), (os, od), xt))
    }

    fn int(&self, id: i32) -> Result<i64, Refusal> {
        match self.val(id)? {
            Val::Int(v) => Ok(*v),
            Val::Bool(b) => Ok(i64::from(*b)),
            Val::SymInt => self.syms.get(&(id as usize)).copied().ok_or_else(|| {
                bad(format!(
                    "symbolic int {id} is read before an operator computes it"
                ))
            }),
            v => Err(bad(format!("value {id} is {}, not an int", v.describe()))),
        }
    }

    fn double(&self, id: i32) -> Result<f64, Refusal> {
        match self.val(id)? {
            Val::Double(v) => Ok(*v),
            Val::Int(v) => Ok(*v as f64),
            v => Err(bad(format!("value {id} is {}, not a number", v.describe()))),
        }
    }

    fn opt_double(&self, id: i32) -> Result<Option<f64>, Refusal> {
        match self.val(id)? {
            Val::None => Ok(None),
            _ => self.double(id).map(Some),
        }
    }

    fn boolean(&self, id: i32) -> Result<bool, Refusal> {
        match self.val(id)? {
            Val::Bool(b) => Ok(*b),
            v => Err(bad(format!("value {id} is {}, not a bool", v.describe()))),
        }
    }

    fn ints(&self, id: i32) -> Result<Vec<i64>, Refusal> {
        match self.val(id)? {
            Val::Ints(v) => Ok(v.clone()),
            Val::Int(v) => Ok(vec![*v]),
            v => Err(bad(format!(
                "value {id} is {}, not an int list",
                v.describe()
            ))),
        }
    }

    fn is_none(&self, id: i32) -> Result<bool, Refusal> {
        Ok(matches!(self.val(id)?, Val::None))
    }

    fn string(&self, id: i32) -> Result<&'d str, Refusal> {
        match self.val(id)? {
            Val::Str(s) => Ok(s),
            v => Err(bad(format!("value {id} is {}, not a string", v.describe()))),
        }
    }

    /// Whether any argument is (or lists) a tensor of a dtype the engine has no kernels for.
    fn touches_other_dtypes(&self, a: &[i32]) -> bool {
        let other = |id: usize| matches!(self.vals.get(id), Some(Val::OtherTensor(_)));
        a.iter().any(|&id| {
            let Ok(i) = usize::try_from(id) else {
                return false;
            };
            other(i)
                || matches!(self.vals.get(i), Some(Val::Values(l)) if l.iter().any(|&j| other(j)))
        })
    }

    /// The declared sizes of tensor `id` (upper bounds where the graph has symbolic sizes).
    fn declared(&self, id: i32) -> Result<Vec<usize>, Refusal> {
        match self.val(id)? {
            Val::Tensor { dims, .. } => Ok(dims.clone()),
            v => Err(bad(format!("value {id} is {}, not a tensor", v.describe()))),
        }
    }

    /// The home of output tensor `id`, which holds `want` values of dtype `dt` at this run: at
    /// most its declared elements in the same rank (exactly its declared sizes in a graph
    /// without symbolic sizes).
    fn out(&mut self, id: i32, want: &[usize], dt: Dt) -> Result<Slot, Refusal> {
        let decl = self.declared(id)?;
        let (slot, _, t) = self.any_tensor(id)?;
        if t != dt {
            return Err(Refusal::Op);
        }
        let fits = if self.dynamic {
            want.len() == decl.len() && numel(want) <= numel(&decl)
        } else {
            want == decl.as_slice()
        };
        if !fits {
            return Err(bad(format!(
                "an output of sizes {want:?} where {decl:?} are declared"
            )));
        }
        if want != decl.as_slice() {
            self.now.insert(id as usize, want.to_vec());
        }
        Ok(slot)
    }

    /// Words for the operator being lowered alone (alive during it only).
    fn scratch(&mut self, words: u64) -> Result<Slot, Refusal> {
        let key = (self.vals.len() + self.current, self.seg());
        self.touch(key);
        if let Some(&s) = self.slots.get(&key) {
            return Ok(s);
        }
        let slot = self.home(key, words)?;
        self.slots.insert(key, slot);
        Ok(slot)
    }

    /// Sets symbolic int `id` (an operator's output) for this run.
    fn set_sym(&mut self, id: i32, v: i64) -> Lowered {
        match self.val(id)? {
            Val::SymInt => {
                self.syms.insert(id as usize, v);
                Ok(())
            }
            other => Err(bad(format!(
                "value {id} is {}, not a symbolic int",
                other.describe()
            ))),
        }
    }

    /// A size list: ints, or a list of ints and symbolic ints.
    fn size_list(&self, id: i32) -> Result<Vec<i64>, Refusal> {
        match self.val(id)? {
            Val::Values(items) => items
                .iter()
                .map(|&v| self.int(i32::try_from(v).map_err(|_| bad("value id"))?))
                .collect(),
            _ => self.ints(id),
        }
    }

    /// The two value ids of a list of two (an operator's pair of outputs).
    fn pair(&self, id: i32) -> Result<[i32; 2], Refusal> {
        match self.val(id)? {
            Val::Values(v) if v.len() == 2 => {
                let id = |v: usize| i32::try_from(v).map_err(|_| bad("value id"));
                Ok([id(v[0])?, id(v[1])?])
            }
            _ => Err(bad(format!("value {id} is not a list of two"))),
        }
    }

    fn lower(&mut self, name: &str, a: &[i32]) -> Lowered {
        if self.touches_other_dtypes(a) {
            return Err(Refusal::Op);
        }
        let need = |n: usize| {
            if a.len() == n {
                Ok(())
            } else {
                Err(bad(format!("{} arguments (expected {n})", a.len())))
            }
        };
        let refused = |what: &str| bad(format!("unsupported {what}"));
        match name {
            "aten.relu.default" => self.unary(a, 2, 0, [0.0; 3]),
            "aten.sigmoid.default" => self.unary(a, 2, 1, [0.0; 3]),
            "aten.tanh.default" => self.unary(a, 2, 2, [0.0; 3]),
            "aten.exp.default" => self.unary(a, 2, 3, [0.0; 3]),
            "aten.neg.default" => self.unary(a, 2, 4, [0.0; 3]),
            "aten.abs.default" => self.unary(a, 2, 5, [0.0; 3]),
            "aten.sqrt.default" => self.unary(a, 2, 6, [0.0; 3]),
            "aten.rsqrt.default" => self.unary(a, 2, 7, [0.0; 3]),
            "aten.gelu.default" => {
                need(3)?;
                let code = match self.string(a[1])? {
                    "none" => 8,
                    "tanh" => 9,
                    other => return Err(refused(&format!("gelu approximation {other:?}"))),
                };
                self.unary(a, 3, code, [0.0; 3])
            }
            "aten.hardtanh.default" => {
                need(4)?;
                let f = [self.double(a[1])?, self.double(a[2])?, 0.0];
                self.unary(a, 4, 11, f)
            }
            "aten.clamp.default" => {
                need(4)?;
                let lo = self.opt_double(a[1])?.unwrap_or(f64::NEG_INFINITY);
                let hi = self.opt_double(a[2])?.unwrap_or(f64::INFINITY);
                self.unary(a, 4, 11, [lo, hi, 0.0])
            }
            "aten.pow.Tensor_Scalar" => {
                need(3)?;
                match self.double(a[1])? {
                    2.0 => self.unary(a, 3, 22, [0.0; 3]),
                    0.5 => self.unary(a, 3, 6, [0.0; 3]),
                    e => Err(refused(&format!("exponent {e}"))),
                }
            }
            "aten.add.Tensor" if self.is_int(a[0]) => {
                need(4)?;
                let alpha = i32::try_from(self.int(a[2])?).map_err(|_| bad("alpha"))?;
                self.int_step(0, (alpha, 0), &[a[0], a[1]], a[3], Dt::I32)
            }
            "aten.add.Tensor" | "aten.sub.Tensor" => {
                need(4)?;
                let code = if name == "aten.add.Tensor" { 0 } else { 1 };
                let alpha = self.double(a[2])?;
                self.binary(a[0], a[1], a[3], code, alpha)
            }
            "aten.mul.Tensor" => {
                need(3)?;
                self.binary(a[0], a[1], a[2], 2, 1.0)
            }
            "aten.div.Tensor" => {
                need(3)?;
                self.binary(a[0], a[1], a[2], 3, 1.0)
            }
            "aten.convolution.default" | "et_vk.conv_with_clamp.default" => {
                let clamp = name.starts_with("et_vk");
                need(if clamp { 12 } else { 10 })?;
                self.conv(a, clamp)
            }
            "aten.linear.default" => {
                need(4)?;
                self.linear(a)
            }
            "aten.addmm.default" => {
                need(6)?;
                self.matmul(
                    a[1],
                    a[2],
                    Some(a[0]),
                    (self.double(a[4])?, self.double(a[3])?),
                    a[5],
                )
            }
            "aten.mm.default" | "aten.bmm.default" => {
                need(3)?;
                self.matmul(a[0], a[1], None, (1.0, 0.0), a[2])
            }
            "aten.mean.dim" | "aten.sum.dim_IntList" => {
                need(5)?;
                if !self.is_none(a[3])? {
                    return Err(refused("dtype"));
                }
                let code = if name == "aten.mean.dim" { 1 } else { 0 };
                self.reduce(a[0], &self.ints(a[1])?, self.boolean(a[2])?, code, a[4])
            }
            "aten._softmax.default" | "aten._log_softmax.default" => {
                need(4)?;
                if self.boolean(a[2])? {
                    return Err(refused("half_to_float"));
                }
                let (x, dims) = self.tensor(a[0])?;
                let (o, od) = self.tensor(a[3])?;
                if dims != od {
                    return Err(bad("output shape"));
                }
                let (dim, inner) = if dims.is_empty() {
                    (1, 1)
                } else {
                    let d = pteron_core::normalize_dim(self.int(a[1])?, dims.len())
                        .map_err(|e| bad(e.to_string()))?;
                    (
                        dims[d] as u64,
                        dims[d + 1..].iter().map(|&v| v as u64).product(),
                    )
                };
                let numel: u64 = dims.iter().map(|&v| v as u64).product();
                let rows = if dim == 0 { 0 } else { numel / dim };
                emit::softmax(self, rows, dim, inner, x, o, name.contains("log"))
                    .ok_or_else(|| bad("softmax too large"))
            }
            "aten.native_layer_norm.default" => {
                need(6)?;
                self.layer_norm(a)
            }
            "aten.view_copy.default"
            | "aten.clone.default"
            | "aten._unsafe_view.default"
            | "aten.squeeze_copy.dims"
            | "aten.unsqueeze_copy.default"
            | "et_vk.prepack.default" => {
                let out = *a.last().ok_or_else(|| bad("no output"))?;
                let (x, xd, dt) = self.any_tensor(a[0])?;
                let n = numel(&xd);
                let want = match name {
                    "aten.view_copy.default" | "aten._unsafe_view.default" if a.len() == 3 => {
                        view_sizes(&self.size_list(a[1])?, n)
                            .ok_or_else(|| bad(format!("a view of {xd:?} as {:?}", a[1])))?
                    }
                    "aten.clone.default" | "et_vk.prepack.default" => xd.clone(),
                    _ => self.declared(out)?,
                };
                if numel(&want) != n {
                    return Err(bad(format!("a view of {xd:?} as {want:?}")));
                }
                let o = self.out(out, &want, dt)?;
                emit::copy_step(self, &[n], (x.off, &[1]), (o.off, &[1]))
                    .ok_or_else(|| bad("copy too large"))
            }
            "aten.permute_copy.default" => {
                need(3)?;
                let ((x, xd), (o, od), _) = self.same_dtype(a[0], a[2])?;
                let dims = self.ints(a[1])?;
                let st = emit::strides(&xd);
                let rank = xd.len();
                if dims.len() != rank || od.len() != rank {
                    return Err(bad("permutation rank"));
                }
                let mut src = Vec::with_capacity(rank);
                let mut seen = vec![false; rank];
                for (k, &d) in dims.iter().enumerate() {
                    let d = pteron_core::normalize_dim(d, rank).map_err(|e| bad(e.to_string()))?;
                    if std::mem::replace(&mut seen[d], true) || od[k] != xd[d] {
                        return Err(bad("not a permutation of the input"));
                    }
                    src.push(st[d]);
                }
                let shape: Vec<u64> = od.iter().map(|&v| v as u64).collect();
                emit::copy_step(self, &shape, (x.off, &src), (o.off, &emit::strides(&od)))
                    .ok_or_else(|| bad("copy too large"))
            }
            "aten.expand_copy.default" => {
                need(4)?;
                let ((x, xd), (o, od), _) = self.same_dtype(a[0], a[3])?;
                let src = emit::broadcast_strides(&xd, &od).ok_or_else(|| bad("expand shape"))?;
                let shape: Vec<u64> = od.iter().map(|&v| v as u64).collect();
                emit::copy_step(self, &shape, (x.off, &src), (o.off, &emit::strides(&od)))
                    .ok_or_else(|| bad("copy too large"))
            }
            "aten.ge.Scalar" => {
                need(3)?;
                let s = i32::try_from(self.int(a[1])?).map_err(|_| bad("scalar"))?;
                self.int_step(1, (s, 0), &[a[0]], a[2], Dt::Bool)
            }
            "aten.bitwise_and.Tensor" => {
                need(3)?;
                self.int_step(2, (0, 0), &[a[0], a[1]], a[2], Dt::Bool)
            }
            "aten.where.self" => {
                need(4)?;
                let (_, _, ct) = self.any_tensor(a[0])?;
                let (_, _, xt) = self.any_tensor(a[1])?;
                let (_, _, yt) = self.any_tensor(a[2])?;
                let (_, _, ot) = self.any_tensor(a[3])?;
                if ct != Dt::Bool || xt != ot || yt != ot {
                    return Err(Refusal::Op);
                }
                self.int_step(5, (0, 0), &[a[0], a[1], a[2]], a[3], ot)
            }
            "aten.arange.start_step" => {
                need(8)?;
                let (start, end, step) = (self.int(a[0])?, self.int(a[1])?, self.int(a[2])?);
                let (o, od, ot) = self.any_tensor(a[7])?;
                let len = if step > 0 && end > start {
                    (end - start + step - 1) / step
                } else {
                    return Err(bad("arange range"));
                };
                let fits = |v: i64| i32::try_from(v).map_err(|_| bad("arange bounds"));
                if ot != Dt::I32 || od.as_slice() != [len as usize] {
                    return Err(Refusal::Op);
                }
                fits(end)?;
                emit::ints(self, 6, (fits(start)?, fits(step)?), &[], (o, &od))
                    .ok_or_else(|| bad("too large"))
            }
            "aten.full.default" => {
                need(7)?;
                let (o, od, ot) = self.any_tensor(a[6])?;
                let size = self.ints(a[0])?;
                if size.len() != od.len() || size.iter().zip(&od).any(|(&s, &d)| s != d as i64) {
                    return Err(bad("full size"));
                }
                let word = match (ot, self.val(a[1])?) {
                    (Dt::F32, _) => (self.double(a[1])? as f32).to_bits(),
                    (Dt::I32, Val::Int(v)) => i32::try_from(*v).map_err(|_| bad("fill"))? as u32,
                    (Dt::Bool, Val::Bool(v)) => u32::from(*v),
                    (Dt::Bool, Val::Int(v)) => u32::from(*v != 0),
                    _ => return Err(Refusal::Op),
                };
                emit::ints(self, 7, (word as i32, 0), &[], (o, &od)).ok_or_else(|| bad("too large"))
            }
            "dim_order_ops._to_dim_order_copy.default" => {
                need(8)?;
                let (_, xd, xt) = self.any_tensor(a[0])?;
                let (_, od, ot) = self.any_tensor(a[7])?;
                let order = self.ints(a[6])?;
                if xd != od || order.iter().enumerate().any(|(k, &d)| d != k as i64) {
                    return Err(bad("a dim order change"));
                }
                let code = match (xt, ot) {
                    (x, o) if x == o => {
                        let ((x, _), (o, _), _) = self.same_dtype(a[0], a[7])?;
                        let n: u64 = od.iter().map(|&v| v as u64).product();
                        return emit::copy_step(self, &[n], (x.off, &[1]), (o.off, &[1]))
                            .ok_or_else(|| bad("too large"));
                    }
                    (Dt::I32 | Dt::Bool, Dt::F32) => 3,
                    (Dt::I32, Dt::Bool) => 4,
                    _ => return Err(Refusal::Op),
                };
                self.int_step(code, (0, 0), &[a[0]], a[7], ot)
            }
            "aten.embedding.default" => {
                need(6)?;
                let (w, wd) = self.tensor(a[0])?;
                let (i, id, it) = self.any_tensor(a[1])?;
                let &[rows, width] = wd.as_slice() else {
                    return Err(bad("embedding weight rank"));
                };
                let mut want = id.clone();
                want.push(width);
                if it != Dt::I32 {
                    return Err(bad("embedding indices"));
                }
                let o = self.out(a[5], &want, Dt::F32)?;
                let tokens: u64 = id.iter().map(|&v| v as u64).product();
                emit::embedding(self, w, (rows as u64, width as u64), i, tokens, o)
                    .ok_or_else(|| bad("too large"))
            }
            "aten.gather.default" => {
                need(5)?;
                let ((x, xd), (o, od), _) = self.same_dtype(a[0], a[4])?;
                let (i, id, it) = self.any_tensor(a[2])?;
                let dim = pteron_core::normalize_dim(self.int(a[1])?, xd.len().max(1))
                    .map_err(|e| bad(e.to_string()))?;
                // The index may be smaller than the source on every other dim.
                if it != Dt::I32
                    || id != od
                    || id.len() != xd.len()
                    || id
                        .iter()
                        .zip(&xd)
                        .enumerate()
                        .any(|(k, (&i, &x))| k != dim && i > x)
                {
                    return Err(bad("gather shapes"));
                }
                emit::gather(self, (x, &xd), dim, i, (o, &od)).ok_or_else(|| bad("too large"))
            }
            "aten.slice_copy.Tensor" => {
                need(6)?;
                let (x, xd, dt) = self.any_tensor(a[0])?;
                let rank = xd.len();
                let d = pteron_core::normalize_dim(self.int(a[1])?, rank.max(1))
                    .map_err(|e| bad(e.to_string()))?;
                if rank == 0 {
                    return Err(bad("0-d slice"));
                }
                let size = xd[d] as i64;
                let opt = |b: &Self, id: i32, default: i64| -> Result<i64, Refusal> {
                    if b.is_none(id)? {
                        Ok(default)
                    } else {
                        b.int(id)
                    }
                };
                let clampi = |v: i64| {
                    if v < 0 {
                        (v + size).max(0)
                    } else {
                        v.min(size)
                    }
                };
                let start = clampi(opt(self, a[2], 0)?);
                let end = clampi(opt(self, a[3], size)?).max(start);
                let step = self.int(a[4])?;
                if step <= 0 {
                    return Err(bad("slice step"));
                }
                let mut want = xd.clone();
                want[d] = ((end - start + step - 1) / step) as usize;
                let od = want.clone();
                let o = self.out(a[5], &want, dt)?;
                let st = emit::strides(&xd);
                let mut src = st.clone();
                src[d] = st[d]
                    .checked_mul(step as u64)
                    .ok_or_else(|| bad("slice step"))?;
                let shape: Vec<u64> = od.iter().map(|&v| v as u64).collect();
                emit::copy_step(
                    self,
                    &shape,
                    (x.off + start as u64 * st[d], &src),
                    (o.off, &emit::strides(&od)),
                )
                .ok_or_else(|| bad("copy too large"))
            }
            "sym_size.int" => {
                need(3)?;
                let (_, d, _) = self.any_tensor(a[0])?;
                let k = pteron_core::normalize_dim(self.int(a[1])?, d.len().max(1))
                    .map_err(|e| bad(e.to_string()))?;
                let v = *d.get(k).ok_or_else(|| bad("the size of a 0-d tensor"))?;
                self.set_sym(a[2], v as i64)
            }
            "et_vk.select_as_symint.default" => {
                need(4)?;
                let (_, d, _) = self.any_tensor(a[0])?;
                let dim = pteron_core::normalize_dim(self.int(a[1])?, d.len().max(1))
                    .map_err(|e| bad(e.to_string()))?;
                let size = *d.get(dim).ok_or_else(|| bad("a 0-d tensor"))?;
                if numel(&d) != size as u64 {
                    return Err(bad(
                        "a symbolic int read from a tensor of more than one row",
                    ));
                }
                let index = self.int(a[2])?;
                let index = if index < 0 {
                    index + size as i64
                } else {
                    index
                };
                // Only the graph's inputs are known on the host when the steps are made.
                let v = self
                    .host
                    .get(&(a[0] as usize))
                    .ok_or_else(|| bad("a symbolic int read from a tensor the GPU computes"))?;
                let v = usize::try_from(index)
                    .ok()
                    .and_then(|i| v.get(i))
                    .copied()
                    .ok_or_else(|| bad(format!("index {index} of {size} values")))?;
                self.set_sym(a[3], v)
            }
            "add" | "sub" | "mul" => {
                need(3)?;
                let (x, y) = (self.int(a[0])?, self.int(a[1])?);
                let v = match name {
                    "add" => x.checked_add(y),
                    "sub" => x.checked_sub(y),
                    _ => x.checked_mul(y),
                };
                self.set_sym(a[2], v.ok_or_else(|| bad("symbolic int overflows"))?)
            }
            "aten.select_copy.int" => {
                need(4)?;
                let (x, xd, dt) = self.any_tensor(a[0])?;
                let d = pteron_core::normalize_dim(self.int(a[1])?, xd.len().max(1))
                    .map_err(|e| bad(e.to_string()))?;
                let size = *xd.get(d).ok_or_else(|| bad("select of a 0-d tensor"))? as i64;
                let index = self.int(a[2])?;
                let index = if index < 0 { index + size } else { index };
                if !(0..size).contains(&index) {
                    return Err(bad(format!("index {index} of {size}")));
                }
                let mut want = xd.clone();
                want.remove(d);
                let o = self.out(a[3], &want, dt)?;
                let mut src = emit::strides(&xd);
                let off = x.off + index as u64 * src[d];
                src.remove(d);
                let shape: Vec<u64> = want.iter().map(|&v| v as u64).collect();
                emit::copy_step(self, &shape, (off, &src), (o.off, &emit::strides(&want)))
                    .ok_or_else(|| bad("copy too large"))
            }
            "et_vk.rms_norm.default" => {
                need(4)?;
                let (x, xd) = self.tensor(a[0])?;
                let (w, wd) = self.tensor(a[1])?;
                let eps = self.double(a[2])?;
                let m = *xd.last().ok_or_else(|| bad("0-d input"))? as u64;
                if numel(&wd) != m {
                    return Err(bad("RMS norm weight shape"));
                }
                let o = self.out(a[3], &xd, Dt::F32)?;
                let rows = if m == 0 { 0 } else { numel(&xd) / m };
                emit::rms_norm(self, (rows, m), eps, x, o, Some(w)).ok_or_else(|| bad("too large"))
            }
            "et_vk.apply_rotary_emb.default" => {
                need(5)?;
                let outs = self.pair(a[4])?;
                let (c, cd) = self.tensor(a[2])?;
                let (sn, sd) = self.tensor(a[3])?;
                for (x_id, o_id) in [(a[0], outs[0]), (a[1], outs[1])] {
                    let (x, xd) = self.tensor(x_id)?;
                    let &[1, t, h, d] = xd.as_slice() else {
                        return Err(bad(format!("rotary embedding of {xd:?}")));
                    };
                    if d % 2 != 0 || cd != [t, d / 2] || sd != cd {
                        return Err(bad(format!("rotary tables {cd:?} for {xd:?}")));
                    }
                    let o = self.out(o_id, &xd, Dt::F32)?;
                    let dims = (t as u64, h as u64, d as u64 / 2);
                    emit::rope(self, dims, x, o, (c, sn)).ok_or_else(|| bad("too large"))?;
                }
                Ok(())
            }
            "et_vk.apply_rotary_emb_hf.default" => {
                need(6)?;
                let outs = self.pair(a[5])?;
                let (c, cd) = self.tensor(a[2])?;
                let (sn, sd) = self.tensor(a[3])?;
                let start = self.int(a[4])?;
                let &[rows, rotary] = cd.as_slice() else {
                    return Err(bad(format!("rotary tables {cd:?}")));
                };
                for (x_id, o_id) in [(a[0], outs[0]), (a[1], outs[1])] {
                    let (x, xd) = self.tensor(x_id)?;
                    let &[1, t, h, d] = xd.as_slice() else {
                        return Err(bad(format!("rotary embedding of {xd:?}")));
                    };
                    let end = start.checked_add(t as i64);
                    if sd != cd || rotary > d || start < 0 || end.is_none_or(|e| e > rows as i64) {
                        return Err(bad(format!("rotary tables {cd:?} at {start} for {xd:?}")));
                    }
                    let o = self.out(o_id, &xd, Dt::F32)?;
                    let dims = (t as u64, h as u64, d as u64);
                    emit::rope_halves(self, dims, (rotary as u64, start as u64), x, o, (c, sn))
                        .ok_or_else(|| bad("rotary shapes"))?;
                }
                Ok(())
            }
            "aten.cat.default" => {
                need(3)?;
                self.cat(a)
            }
            "sdpa_with_kv_cache.default" | "llama.sdpa_with_kv_cache.default" => {
                need(12)?;
                self.sdpa_with_kv_cache(a)
            }
            "torchao.choose_qparams_affine.default" => {
                need(11)?;
                self.choose_qparams(a)
            }
            "et_vk.linear_dq8ca_q4gsw.default" => {
                need(9)?;
                self.linear4(a[0], Some((a[1], a[2])), [a[3], a[5], a[6], a[7]], a[8])
            }
            "et_vk.linear_q4gsw.default" => {
                need(6)?;
                self.linear4(a[0], None, [a[1], a[2], a[3], a[4]], a[5])
            }
            _ => Err(Refusal::Op),
        }
    }

    /// `sdpa_with_kv_cache(q, k, v, k_cache, v_cache, start_pos, seq_len, mask, dropout,
    /// is_causal, scale)`: k and v are written into the caches at rows `start_pos..`, then the
    /// queries attend to the cache's first `start_pos + T` rows. The caches are the graph's
    /// constants, so they stay on the device from run to run.
    fn sdpa_with_kv_cache(&mut self, a: &[i32]) -> Lowered {
        let (q, qd) = self.tensor(a[0])?;
        let (k, kd) = self.tensor(a[1])?;
        let (v, vd) = self.tensor(a[2])?;
        let (kc, kcd) = self.tensor(a[3])?;
        let (vc, vcd) = self.tensor(a[4])?;
        let s = self.seg();
        for id in [a[3], a[4]] {
            let i = id as usize;
            if self.slots.keys().any(|&(v, g)| v == i && g != s) {
                return Err(bad("a cache that operators in two buffers use"));
            }
            self.written.insert(i, s);
        }
        let (&[1, t, h, d], &[1, t2, kvh, d2], &[1, ctx, kvh2, d3]) =
            (qd.as_slice(), kd.as_slice(), kcd.as_slice())
        else {
            return Err(bad(format!("attention of {qd:?} over {kcd:?}")));
        };
        if t2 != t || d2 != d || d3 != d || kvh2 != kvh || vd != kd || vcd != kcd || kvh == 0 {
            return Err(bad(format!("attention of {qd:?}, {kd:?} over {kcd:?}")));
        }
        let start = self.int(a[5])?;
        let end = start
            .checked_add(t as i64)
            .filter(|&e| start >= 0 && e <= ctx as i64);
        let Some(end) = end else {
            return Err(bad(format!(
                "positions {start}..+{t} outside a cache of {ctx}"
            )));
        };
        if !self.is_none(a[7])? {
            return Err(bad("unsupported attention mask"));
        }
        if self.double(a[8])? != 0.0 {
            return Err(bad("unsupported dropout"));
        }
        let causal = self.boolean(a[9])?;
        let scale = self.opt_double(a[10])?.unwrap_or(1.0 / (d as f64).sqrt());
        let row = (kvh * d) as u64;
        let (n, at) = (t as u64 * row, start as u64 * row);
        for (x, cache) in [(k, kc), (v, vc)] {
            emit::copy_step(self, &[n], (x.off, &[1]), (cache.off + at, &[1]))
                .ok_or_else(|| bad("copy too large"))?;
        }
        // Score rows for the most tokens the graph declares.
        let most = self.declared(a[0])?.get(1).copied().unwrap_or(t) as u64;
        let scratch = self.scratch(most * h as u64 * ctx as u64)?;
        let o = self.out(a[11], &qd, Dt::F32)?;
        emit::attend(
            self,
            emit::Attention {
                tokens: t as u64,
                heads: h as u64,
                kv_heads: kvh as u64,
                dim: d as u64,
                start: start as u64,
                keys: end as u64,
                ctx: ctx as u64,
                scale,
                causal,
                q,
                k: kc,
                v: vc,
                out: o,
                scratch,
            },
        )
        .ok_or_else(|| bad("attention shapes"))
    }

    /// `cat(tensors, dim)`: each piece copied into its place along `dim`.
    fn cat(&mut self, a: &[i32]) -> Lowered {
        let ids = match self.val(a[0])? {
            Val::Values(v) => v.clone(),
            v => return Err(bad(format!("cat of {}", v.describe()))),
        };
        let mut pieces = Vec::with_capacity(ids.len());
        let mut dt = None;
        for id in ids {
            let id = i32::try_from(id).map_err(|_| bad("value id"))?;
            let (s, d, t) = self.any_tensor(id)?;
            if *dt.get_or_insert(t) != t {
                return Err(Refusal::Op);
            }
            pieces.push((s, d));
        }
        let Some(dt) = dt else {
            return Err(bad("cat of nothing"));
        };
        let rank = pieces[0].1.len();
        let dim = pteron_core::normalize_dim(self.int(a[1])?, rank.max(1))
            .map_err(|e| bad(e.to_string()))?;
        let mut want = pieces[0].1.clone();
        want[dim] = 0;
        for (_, d) in &pieces {
            let same = d.len() == rank && (0..rank).all(|k| k == dim || d[k] == want[k]);
            if !same {
                return Err(bad(format!("cat of {:?} along {dim}", pieces[0].1)));
            }
            want[dim] += d[dim];
        }
        let o = self.out(a[2], &want, dt)?;
        let dst = emit::strides(&want);
        let mut at = 0u64;
        for (s, d) in pieces {
            let shape: Vec<u64> = d.iter().map(|&v| v as u64).collect();
            emit::copy_step(
                self,
                &shape,
                (s.off, &emit::strides(&d)),
                (o.off + at * dst[dim], &dst),
            )
            .ok_or_else(|| bad("copy too large"))?;
            at += d[dim] as u64;
        }
        Ok(())
    }

    /// `choose_qparams_affine(input, mapping, block_size, target_dtype, quant_min, quant_max,
    /// eps, scale_dtype, zero_point_dtype, keepdim)`: asymmetric, one block per row of the last
    /// dim (dynamic per-token activations).
    fn choose_qparams(&mut self, a: &[i32]) -> Lowered {
        if self.string(a[1])? != "ASYMMETRIC" {
            return Err(bad("unsupported mapping"));
        }
        if !self.is_none(a[6])? || !self.is_none(a[7])? || !self.is_none(a[8])? {
            return Err(bad("unsupported eps or dtypes"));
        }
        let (x, xd) = self.tensor(a[0])?;
        let block = self.ints(a[2])?;
        let (&m, lead) = xd.split_last().ok_or_else(|| bad("0-d input"))?;
        let per_row = block.len() == xd.len()
            && block.last() == Some(&(m as i64))
            && block[..lead.len()].iter().all(|&b| b == 1);
        if !per_row {
            return Err(bad(format!("blocks {block:?} of {xd:?}")));
        }
        let fit = |v: i64| i32::try_from(v).map_err(|_| bad("quantization range"));
        let (qmin, qmax) = (fit(self.int(a[4])?)?, fit(self.int(a[5])?)?);
        if qmin >= qmax {
            return Err(bad("quantization range"));
        }
        let mut want = lead.to_vec();
        if self.boolean(a[9])? {
            want.push(1);
        }
        let [so, zo] = self.pair(a[10])?;
        let scale = self.out(so, &want, Dt::F32)?;
        let zdt = match self.val(zo)? {
            Val::Tensor { dt: Dt::I32, .. } => Dt::I32,
            _ => Dt::I8,
        };
        let zp = self.out(zo, &want, zdt)?;
        emit::row_qparams(self, (numel(lead), m as u64), (qmin, qmax), x, (scale, zp))
            .ok_or_else(|| bad("too large"))
    }

    /// A linear layer over 4-bit grouped weights ([`emit::linear4`]); `dq`: the input's int8
    /// row scales and zero points (dynamically quantized activations); `[weights, scales,
    /// group_size, bias]`.
    fn linear4(&mut self, x: i32, dq: Option<(i32, i32)>, w: [i32; 4], out: i32) -> Lowered {
        let (xs, xd) = self.tensor(x)?;
        let (&k, lead) = xd.split_last().ok_or_else(|| bad("0-d input"))?;
        let rows = numel(lead);
        let (ws, wd, wt) = self.any_tensor(w[0])?;
        let &[n, row_bytes] = wd.as_slice() else {
            return Err(bad("4-bit weight rank"));
        };
        let group = usize::try_from(self.int(w[2])?).map_err(|_| bad("group size"))?;
        let (ss, sd) = self.tensor(w[1])?;
        if wt != Dt::U8 || row_bytes * 2 < k || group == 0 || sd.len() != 2 || sd[1] != n {
            return Err(bad(format!(
                "4-bit weights {wd:?}, scales {sd:?} for {xd:?}"
            )));
        }
        if sd[0] < k.div_ceil(group) {
            return Err(bad("fewer scales than groups"));
        }
        let bias = match self.opt_tensor(w[3])? {
            Some((b, bd)) if numel(&bd) == n as u64 => Some(b),
            Some(_) => return Err(bad("bias shape")),
            None => None,
        };
        let dq = match dq {
            Some((s, z)) => {
                let (s, sd) = self.tensor(s)?;
                let (z, zd, zt) = self.any_tensor(z)?;
                if numel(&sd) != rows || numel(&zd) != rows || !matches!(zt, Dt::I8 | Dt::I32) {
                    return Err(bad("input scales or zero points shape"));
                }
                Some((s, z))
            }
            None => None,
        };
        let mut want = lead.to_vec();
        want.push(n);
        let o = self.out(out, &want, Dt::F32)?;
        emit::linear4(
            self,
            emit::Linear4 {
                rows,
                n: n as u64,
                k: k as u64,
                x: xs,
                w: ws,
                row_bytes: row_bytes as u64,
                scales: ss,
                group: group as u64,
                out: o,
                bias,
                dq,
            },
        )
        .ok_or_else(|| bad("4-bit product too large"))
    }

    /// An optional float32 tensor argument.
    fn opt_tensor(&mut self, id: i32) -> Result<Option<(Slot, Vec<usize>)>, Refusal> {
        if self.is_none(id)? {
            Ok(None)
        } else {
            self.tensor(id).map(Some)
        }
    }

    fn is_int(&self, id: i32) -> bool {
        matches!(self.val(id), Ok(Val::Tensor { dt: Dt::I32, .. }))
    }

    /// An `ints.wgsl` step over `out` (of dtype `dt`) reading `operands` broadcast to it.
    fn int_step(
        &mut self,
        code: u32,
        s: (i32, i32),
        operands: &[i32],
        out: i32,
        dt: Dt,
    ) -> Lowered {
        let mut ops = Vec::new();
        for &id in operands {
            let (slot, dims, _) = self.any_tensor(id)?;
            ops.push((slot, dims));
        }
        let (o, od, ot) = self.any_tensor(out)?;
        if ot != dt {
            return Err(Refusal::Op);
        }
        let refs: Vec<(Slot, &[usize])> = ops.iter().map(|(s, d)| (*s, d.as_slice())).collect();
        emit::ints(self, code, s, &refs, (o, &od)).ok_or_else(|| bad("shapes"))
    }

    /// `f(x)` for an op of `n` arguments (input first, output last).
    fn unary(&mut self, a: &[i32], n: usize, code: u32, f: [f64; 3]) -> Lowered {
        if a.len() != n {
            return Err(bad(format!("{} arguments (expected {n})", a.len())));
        }
        let (x, xd) = self.tensor(a[0])?;
        let o = self.out(a[n - 1], &xd, Dt::F32)?;
        emit::unary(self, code, f, x.off, o.off, numel(&xd)).ok_or_else(|| bad("too large"))
    }

    fn binary(&mut self, x: i32, y: i32, out: i32, code: u32, alpha: f64) -> Lowered {
        let (xs, xd) = self.tensor(x)?;
        let (ys, yd) = self.tensor(y)?;
        let od = broadcast(&xd, &yd).ok_or_else(|| bad(format!("{xd:?} and {yd:?}")))?;
        let o = self.out(out, &od, Dt::F32)?;
        emit::binary(self, code, alpha, (xs, &xd), (ys, &yd), (o, &od))
            .ok_or_else(|| bad(format!("{xd:?} and {yd:?} into {od:?}")))
    }

    fn conv(&mut self, a: &[i32], clamp: bool) -> Lowered {
        if self.boolean(a[6])? {
            return Err(bad("transposed convolution"));
        }
        let (x, xd) = self.tensor(a[0])?;
        let (w, wd) = self.tensor(a[1])?;
        let bias = self.opt_tensor(a[2])?;
        let Some(&out) = a.last() else {
            return Err(bad("no output"));
        };
        let (o, od) = self.tensor(out)?;
        let (stride, pad, dil) = (self.ints(a[3])?, self.ints(a[4])?, self.ints(a[5])?);
        let (geometry, want) =
            emit::conv_geometry(&xd, &wd, (&stride, &pad, &dil), self.int(a[8])?)
                .ok_or_else(|| bad(format!("convolution of {xd:?} by {wd:?}")))?;
        if od.iter().map(|&v| v as u64).ne(want.iter().copied())
            || bias
                .as_ref()
                .is_some_and(|(_, bd)| bd.iter().product::<usize>() as u64 != geometry[3])
        {
            return Err(bad("convolution output or bias shape"));
        }
        let total: u64 = want.iter().product();
        emit::conv2d(self, geometry, x, w, bias.map(|(s, _)| s), o, total)
            .ok_or_else(|| bad("convolution too large"))?;
        if clamp {
            let f = [self.double(a[9])?, self.double(a[10])?, 0.0];
            emit::unary(self, 11, f, o.off, o.off, total).ok_or_else(|| bad("too large"))?;
        }
        Ok(())
    }

    /// `linear(input [..., k], weight [n, k], bias [n]?)`.
    fn linear(&mut self, a: &[i32]) -> Lowered {
        let (x, xd) = self.tensor(a[0])?;
        let (w, wd) = self.tensor(a[1])?;
        let bias = self.opt_tensor(a[2])?;
        let (&k, lead) = xd.split_last().ok_or_else(|| bad("0-d input"))?;
        let &[n, k2] = wd.as_slice() else {
            return Err(bad("weight rank"));
        };
        let mut want = lead.to_vec();
        want.push(n);
        if k2 != k {
            return Err(bad("linear shapes"));
        }
        let o = self.out(a[3], &want, Dt::F32)?;
        let m: u64 = lead.iter().map(|&v| v as u64).product();
        let (n, k) = (n as u64, k as u64);
        let bias = match bias {
            Some((s, bd)) => {
                let st = emit::broadcast_strides(&bd, &[m as usize, n as usize])
                    .ok_or_else(|| bad("bias shape"))?;
                Some((s, [st[0], st[1]]))
            }
            None => None,
        };
        emit::product(
            self,
            emit::Product {
                batch: 1,
                m,
                n,
                k,
                a: (x, [0, k, 1]),
                b: (w, [0, 1, k]),
                out: o,
                bias,
                alpha: 1.0,
                beta: 1.0,
            },
        )
        .ok_or_else(|| bad("product too large"))
    }

    fn matmul(
        &mut self,
        x: i32,
        y: i32,
        bias: Option<i32>,
        (alpha, beta): (f64, f64),
        out: i32,
    ) -> Lowered {
        let (xs, xd) = self.tensor(x)?;
        let (ys, yd) = self.tensor(y)?;
        let (o, od) = self.tensor(out)?;
        let (batch, m, k, k2, n) = match (xd.as_slice(), yd.as_slice()) {
            ([m, k], [k2, n]) => (1, *m, *k, *k2, *n),
            ([b, m, k], [b2, k2, n]) if b == b2 && bias.is_none() => (*b, *m, *k, *k2, *n),
            _ => return Err(bad(format!("product of {xd:?} and {yd:?}"))),
        };
        let want = if xd.len() == 3 {
            vec![batch, m, n]
        } else {
            vec![m, n]
        };
        if k != k2 || od != want {
            return Err(bad("product shapes"));
        }
        let bias = match bias {
            Some(b) => {
                let (s, bd) = self.tensor(b)?;
                let st = emit::broadcast_strides(&bd, &[m, n]).ok_or_else(|| bad("bias shape"))?;
                Some((s, [st[0], st[1]]))
            }
            None => None,
        };
        let (m, n, k, batch) = (m as u64, n as u64, k as u64, batch as u64);
        emit::contiguous_product(self, [batch, m, n, k], (xs, ys, o), bias, (alpha, beta))
            .ok_or_else(|| bad("product too large"))
    }

    fn reduce(&mut self, x: i32, dims: &[i64], keepdim: bool, code: u64, out: i32) -> Lowered {
        let (xs, xd) = self.tensor(x)?;
        let (o, od) = self.tensor(out)?;
        let rank = xd.len();
        let mut reduced = vec![dims.is_empty(); rank];
        for &d in dims {
            let d = pteron_core::normalize_dim(d, rank.max(1)).map_err(|e| bad(e.to_string()))?;
            if rank > 0 {
                reduced[d] = true;
            }
        }
        emit::reduce(self, code, xs, &xd, &reduced, keepdim, (o, &od))
            .ok_or_else(|| bad(format!("reduction of {xd:?} into {od:?}")))
    }

    /// `native_layer_norm(input, normalized_shape, weight?, bias?, eps, [out, mean, rstd])`.
    fn layer_norm(&mut self, a: &[i32]) -> Lowered {
        let (x, xd) = self.tensor(a[0])?;
        let norm = self.ints(a[1])?;
        let nd = norm.len();
        if nd == 0
            || nd > xd.len()
            || norm
                .iter()
                .zip(&xd[xd.len() - nd..])
                .any(|(&n, &d)| n != d as i64)
        {
            return Err(bad("normalized shape"));
        }
        let m: u64 = xd[xd.len() - nd..].iter().map(|&v| v as u64).product();
        let opt = |b: &mut Self, id: i32| -> Result<Option<Slot>, Refusal> {
            if b.is_none(id)? {
                return Ok(None);
            }
            let (s, d) = b.tensor(id)?;
            if d.iter().map(|&v| v as u64).product::<u64>() != m {
                return Err(bad("weight or bias shape"));
            }
            Ok(Some(s))
        };
        let w = opt(self, a[2])?;
        let bias = opt(self, a[3])?;
        let eps = self.double(a[4])?;
        let outs = match self.val(a[5])? {
            Val::Values(v) if v.len() == 3 => v.clone(),
            _ => return Err(bad("outputs are not a list of three")),
        };
        let id = |v: usize| i32::try_from(v).map_err(|_| bad("value id"));
        let (o, od) = self.tensor(id(outs[0])?)?;
        let (mean, md) = self.tensor(id(outs[1])?)?;
        let (rstd, rd) = self.tensor(id(outs[2])?)?;
        let numel: u64 = xd.iter().map(|&v| v as u64).product();
        let rows = if m == 0 { 0 } else { numel / m };
        let count = |d: &[usize]| d.iter().map(|&v| v as u64).product::<u64>();
        if od != xd || count(&md) != rows || count(&rd) != rows || m == 0 {
            return Err(bad("layer norm shapes"));
        }
        emit::layer_norm(self, rows, m, eps, x, o, w, bias, (mean, rstd))
            .ok_or_else(|| bad("too large"))
    }
}

/// Runs ExecuTorch's Vulkan delegates ("VulkanBackend") on a GPU through the GPU engine.
#[derive(Clone, Debug)]
pub struct VulkanBackend {
    gpu: Gpu,
}

impl VulkanBackend {
    pub fn new(gpu: Gpu) -> Self {
        VulkanBackend { gpu }
    }
}

impl Backend for VulkanBackend {
    fn id(&self) -> &str {
        "VulkanBackend"
    }

    fn init<'p>(
        &self,
        init: &BackendInit<'_, 'p>,
    ) -> Result<Box<dyn DelegateHandle + 'p>, KernelError> {
        let (fbytes, bytes) = split(init.processed)?;
        if !fb::vk_graph_buffer_has_identifier(fbytes) {
            return Err(invalid("the flatbuffer is not a VK00 graph"));
        }
        let g = fb::root_as_vk_graph(fbytes).map_err(|e| invalid(format!("flatbuffer: {e}")))?;
        let vals = decode(&g, bytes, init.named_data)?;
        let chain: Vec<(&'p str, Vec<i32>)> = g
            .chain()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c.name().unwrap_or(""),
                    c.args().map(|a| a.iter().collect()).unwrap_or_default(),
                )
            })
            .collect();
        let ids = |l: Option<flatbuffers::Vector<'_, u32>>| -> Vec<i32> {
            l.map(|l| l.iter().map(|v| i32::try_from(v).unwrap_or(-1)).collect())
                .unwrap_or_default()
        };
        let io = (ids(g.input_ids()), ids(g.output_ids()));
        // A graph with symbolic sizes is planned at its declared sizes (upper bounds) with
        // int inputs of zero; each run lowers it again at the run's sizes, in the same homes.
        let dynamic = vals.iter().any(|v| matches!(v, Val::SymInt));
        let mut env = Env::default();
        if dynamic {
            for &id in &io.0 {
                if let Some(Val::Tensor {
                    dims, dt: Dt::I32, ..
                }) = usize::try_from(id).ok().and_then(|i| vals.get(i))
                {
                    env.ints.insert(id as usize, vec![0; numel(dims) as usize]);
                }
            }
        }
        let seg_of = assign_segments(&vals, &chain, self.gpu.max_buffer_bytes() / 4);
        // First pass: every tensor its own words, and when each is used; second pass: tensors
        // never alive together share words.
        let vals = Arc::new(vals);
        let first = lower_graph(vals.clone(), &chain, &io, None, &env, &seg_of)?;
        let plan = Arc::new(first.0.plan());
        let (b, inputs, outputs) =
            lower_graph(vals.clone(), &chain, &io, Some(plan.clone()), &env, &seg_of)?;
        let specs: Vec<SegmentSpec<'_, '_>> = (0..b.words.len())
            .map(|k| SegmentSpec {
                words: b.words[k],
                steps: &b.steps[k],
                consts: &b.consts[k],
                transfers: b.transfers[k].clone(),
            })
            .collect();
        let mut region =
            GpuRegion::with_segments(&self.gpu, &specs, inputs, outputs).map_err(device_failure)?;
        let dynamic = if dynamic {
            region.set_dynamic();
            Some(Dynamic {
                vals,
                chain,
                io,
                plan,
                seg_of,
            })
        } else {
            None
        };
        Ok(Box::new(VkDelegate { region, dynamic }))
    }
}

/// Each operator's segment: operators in chain order fill a segment until the words of the
/// tensors they touch (each counted once, at its declared size, no reuse: an upper bound)
/// would pass `budget`, then the next segment starts.
fn assign_segments(vals: &[Val<'_>], chain: &[(&str, Vec<i32>)], budget: u64) -> Vec<usize> {
    let words = |id: usize| -> u64 {
        match vals.get(id) {
            Some(Val::Tensor { dims, dt, .. }) => {
                let n = numel(dims);
                if *dt == Dt::U8 {
                    n.div_ceil(4)
                } else {
                    n
                }
            }
            _ => 0,
        }
    };
    let ids = |args: &[i32]| -> Vec<usize> {
        let mut out = Vec::new();
        for &a in args {
            let Ok(i) = usize::try_from(a) else { continue };
            match vals.get(i) {
                Some(Val::Values(items)) => out.extend(items.iter().copied()),
                Some(Val::Tensor { .. }) => out.push(i),
                _ => {}
            }
        }
        out
    };
    let mut seg_of = Vec::with_capacity(chain.len());
    let (mut seg, mut used, mut ops) = (0, RESERVED_WORDS, 0);
    let mut seen = std::collections::HashSet::new();
    for (name, args) in chain {
        let touched = ids(args);
        // attention's score rows: tokens x heads x cache rows
        let extra = if name.contains("sdpa") {
            let dim = |k: usize, d: usize| match args.get(k).and_then(|&a| vals.get(a as usize)) {
                Some(Val::Tensor { dims, .. }) => dims.get(d).copied().unwrap_or(0) as u64,
                _ => 0,
            };
            dim(0, 1) * dim(0, 2) * dim(3, 1)
        } else {
            0
        };
        let need = |seen: &std::collections::HashSet<usize>| {
            touched
                .iter()
                .filter(|i| !seen.contains(*i))
                .map(|&i| words(i))
                .sum::<u64>()
                + extra
        };
        if ops > 0 && used.saturating_add(need(&seen)) > budget {
            seg += 1;
            used = RESERVED_WORDS;
            ops = 0;
            seen.clear();
        }
        used = used.saturating_add(need(&seen));
        seen.extend(touched);
        ops += 1;
        seg_of.push(seg);
    }
    seg_of
}

fn device_failure(e: GpuFailure) -> KernelError {
    match e {
        GpuFailure::Refused => KernelError::unsupported(
            "Vulkan delegate: the graph does not fit one buffer of this GPU",
        ),
        GpuFailure::Device(m) => KernelError::unsupported(format!("GPU: {m}")),
    }
}

/// A Vulkan delegate on the device: its region, and for a graph with symbolic sizes what it
/// takes to lower it again at each run's sizes.
struct VkDelegate<'p> {
    region: GpuRegion,
    dynamic: Option<Dynamic<'p>>,
}

struct Dynamic<'p> {
    vals: Arc<Vec<Val<'p>>>,
    chain: Vec<(&'p str, Vec<i32>)>,
    io: (Vec<i32>, Vec<i32>),
    plan: Arc<HashMap<Key, u64>>,
    seg_of: Vec<usize>,
}

impl Dynamic<'_> {
    /// The steps for this run's inputs (sizes, and the values of int inputs).
    fn steps(&self, ctx: &mut KernelContext<'_, '_>) -> Result<Vec<Vec<Step>>, KernelError> {
        let mut env = Env::default();
        for (k, &id) in self.io.0.iter().enumerate() {
            let ([t], []) = ctx.io::<1, 0>([k], [])?;
            let sizes = t.info.sizes().to_vec();
            let ints = match t.info.dtype() {
                ScalarType::Long => Some(
                    t.bytes
                        .chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                        .collect(),
                ),
                ScalarType::Int => Some(
                    t.bytes
                        .chunks_exact(4)
                        .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap_or([0; 4]))))
                        .collect(),
                ),
                _ => None,
            };
            let id = usize::try_from(id).map_err(|_| invalid("input id"))?;
            env.dims.insert(id, sizes);
            if let Some(v) = ints {
                env.ints.insert(id, v);
            }
        }
        let (b, ..) = lower_graph(
            self.vals.clone(),
            &self.chain,
            &self.io,
            Some(self.plan.clone()),
            &env,
            &self.seg_of,
        )?;
        // The outputs' sizes are not resized on the host: they must be the declared ones.
        for &id in &self.io.1 {
            if b.now.contains_key(&(id as usize)) {
                return Err(KernelError::unsupported(
                    "Vulkan delegate: an output whose sizes change with the inputs",
                ));
            }
        }
        Ok(b.steps)
    }
}

impl DelegateHandle for VkDelegate<'_> {
    fn check(&self, args: &ArgView<'_, '_>) -> Result<(), KernelError> {
        self.region.check(args)
    }

    fn execute(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        if let Some(d) = &self.dynamic {
            let steps = d.steps(ctx)?;
            self.region.set_steps(&steps).map_err(device_failure)?;
        }
        self.region.execute(ctx)
    }

    fn memory_bytes(&self) -> usize {
        self.region.memory_bytes()
    }
}

/// Homes of the graph's inputs or outputs: segment, home, dtype.
type Homes = Vec<(usize, Slot, Dt)>;

/// One pass over the chain (see [`VulkanBackend::init`]) at the sizes of `env`'s inputs, in
/// the segments of `seg_of`; with the homes of the graph's inputs and outputs.
fn lower_graph<'d>(
    vals: Arc<Vec<Val<'d>>>,
    chain: &[(&str, Vec<i32>)],
    (input_ids, output_ids): &(Vec<i32>, Vec<i32>),
    plan: Option<Arc<HashMap<Key, u64>>>,
    env: &Env,
    seg_of: &[usize],
) -> Result<(VkBuild<'d>, Homes, Homes), KernelError> {
    let dynamic = vals.iter().any(|v| matches!(v, Val::SymInt));
    let segs = seg_of.last().map_or(1, |&s| s + 1);
    let mut bounds = vec![(usize::MAX, 0); segs];
    for (k, &s) in seg_of.iter().enumerate() {
        bounds[s].0 = bounds[s].0.min(k);
        bounds[s].1 = bounds[s].1.max(k);
    }
    if seg_of.is_empty() {
        bounds[0] = (0, 0);
    }
    let mut b = VkBuild {
        vals,
        seg_of: seg_of.to_vec(),
        bounds,
        slots: HashMap::new(),
        origin: HashMap::new(),
        written: HashMap::new(),
        words: vec![RESERVED_WORDS; segs],
        steps: (0..segs).map(|_| Vec::new()).collect(),
        consts: vec![Vec::new(); segs],
        transfers: vec![Vec::new(); segs],
        kept: Default::default(),
        current: 0,
        life: HashMap::new(),
        plan,
        now: HashMap::new(),
        syms: HashMap::new(),
        host: env.ints.clone(),
        dynamic,
    };
    // The inputs' sizes at this run: the declared rank, at most the declared elements.
    for (&id, dims) in &env.dims {
        let decl = match b.vals.get(id) {
            Some(Val::Tensor { dims, .. }) => dims.clone(),
            _ => return Err(invalid("an input that is not a tensor")),
        };
        if *dims != decl {
            if !dynamic || dims.len() != decl.len() || numel(dims) > numel(&decl) {
                return Err(KernelError::shape(format!(
                    "Vulkan delegate: an input of sizes {dims:?} where {decl:?} are declared"
                )));
            }
            b.now.insert(id, dims.clone());
        }
    }
    let mut unsupported: Vec<String> = Vec::new();
    for (k, (name, args)) in chain.iter().enumerate() {
        b.current = k;
        match b.lower(name, args) {
            Ok(()) => {}
            Err(Refusal::Op) => {
                if !unsupported.iter().any(|u| u == name) {
                    unsupported.push(name.to_string());
                }
            }
            Err(e) => return Err(refusal(name, e)),
        }
    }
    if !unsupported.is_empty() {
        return Err(KernelError::unsupported(format!(
            "Vulkan delegate: operators the GPU engine does not run (or not in these dtypes): {}",
            unsupported.join(", ")
        )));
    }
    // The graph's inputs are there from their segment's start (an input no operator reads
    // gets a home in the first segment), its outputs to their segment's end.
    let home = |b: &mut VkBuild<'d>, id: i32, input: bool| -> Result<_, KernelError> {
        let what = if input { "graph input" } else { "graph output" };
        let i = usize::try_from(id).map_err(|_| invalid(format!("{what} id {id}")))?;
        let seg = match b.origin.get(&i) {
            Some(&s) => s,
            None => {
                b.current = if input {
                    0
                } else {
                    chain.len().saturating_sub(1)
                };
                b.any_tensor(id).map_err(|e| refusal(what, e))?;
                b.seg()
            }
        };
        let (_, _, dt) = b.any_tensor_in(id, seg).map_err(|e| refusal(what, e))?;
        let slot = b.slots[&(i, seg)];
        let (first, last) = b.bounds[seg];
        let e = b.life.entry((i, seg)).or_insert((first, last));
        if input {
            e.0 = first;
        } else {
            b.kept.insert((i, seg));
        }
        Ok((seg, slot, dt))
    };
    let inputs = input_ids
        .iter()
        .map(|&id| home(&mut b, id, true))
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = output_ids
        .iter()
        .map(|&id| home(&mut b, id, false))
        .collect::<Result<Vec<_>, _>>()?;
    // Each buffer ends after its highest planned home.
    for (&(_, s), slot) in &b.slots {
        b.words[s] = b.words[s].max(slot.off + slot.words);
    }
    Ok((b, inputs, outputs))
}

impl VkBuild<'_> {
    /// The dtype of tensor `id` that has a home in segment `seg`.
    fn any_tensor_in(&self, id: i32, seg: usize) -> Result<(Slot, Vec<usize>, Dt), Refusal> {
        let Val::Tensor { dims, dt, .. } = self.val(id)? else {
            return Err(bad(format!("value {id} is not a tensor")));
        };
        let slot = *self
            .slots
            .get(&(id as usize, seg))
            .ok_or_else(|| bad(format!("value {id} has no home")))?;
        Ok((slot, dims.clone(), *dt))
    }

    /// Offsets for the second pass, segment by segment: constants keep theirs (they come
    /// first, in the same order), the other homes share words when their lifetimes do not
    /// overlap.
    fn plan(&self) -> HashMap<Key, u64> {
        let mut out = HashMap::new();
        for s in 0..self.words.len() {
            let consts_end =
                RESERVED_WORDS + self.consts[s].iter().map(|(c, _)| c.words).sum::<u64>();
            let end = self.bounds[s].1;
            let mut values: Vec<(Key, usize, usize, u64)> = self
                .life
                .iter()
                .filter(|(k, _)| k.1 == s)
                .filter_map(|(&key, &(f, l))| {
                    let slot = self.slots.get(&key)?;
                    let l = if self.kept.contains(&key) {
                        end
                    } else {
                        l.min(end)
                    };
                    Some((key, f, l, slot.words))
                })
                .collect();
            values.sort_by_key(|&(key, f, _, _)| (f, key));
            let lives: Vec<(usize, usize, u64)> =
                values.iter().map(|&(_, f, l, n)| (f, l, n)).collect();
            let (offs, _) = place(&lives, consts_end);
            out.extend(values.iter().zip(offs).map(|(&(key, ..), o)| (key, o)));
        }
        out
    }
}

fn refusal(what: &str, e: Refusal) -> KernelError {
    match e {
        Refusal::Op => KernelError::unsupported(format!("Vulkan delegate: {what}")),
        Refusal::Args(m) => KernelError::unsupported(format!("Vulkan delegate: {what}: {m}")),
    }
}
