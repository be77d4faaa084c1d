//! A region on the device: one buffer, the steps' parameters, and the run (upload the inputs,
//! one compute pass with every step, copy the outputs to a mappable buffer, read them back).

use std::num::NonZeroU64;
use std::sync::{mpsc, Arc};

use pteron_core::{ArgAccess, ArgView, DelegateHandle, KernelContext, KernelError, ScalarType};

use crate::device::{Gpu, Inner};
use crate::kernels::Kernel;
use crate::words::{Dt, Slot, Step};

/// Why a region was not made: the device cannot hold it (it stays on the CPU), or the device
/// failed.
pub(crate) enum GpuFailure {
    Refused,
    Device(String),
}

pub(crate) struct GpuRegion {
    gpu: Arc<Inner>,
    segments: Vec<Segment>,
    /// Where each input and output lives: segment, home, dtype.
    inputs: Vec<(usize, Slot, Dt)>,
    outputs: Vec<(usize, Slot, Dt)>,
    /// Every segment's error word, then every output.
    readback: wgpu::Buffer,
    /// Host bytes of an input converted to words (int64 or bool inputs), kept between runs.
    staging: Vec<u8>,
    bytes: u64,
    /// Inputs may hold fewer values than their homes (dynamic shapes: homes are upper bounds).
    dynamic: bool,
}

/// One buffer of a region and the steps over it, run as one compute pass after the values it
/// reads from earlier segments are copied in.
struct Segment {
    buffer: wgpu::Buffer,
    /// The steps' parameter words (bound at each step's offset).
    params: wgpu::Buffer,
    bind_group: wgpu::BindGroup,
    steps: Vec<(Kernel, Arc<wgpu::ComputePipeline>, u32, [u32; 3])>,
    transfers: Vec<Transfer>,
    /// The parameter buffer's bytes and the binding each step sees (steps may be replaced).
    params_bytes: u64,
    binding: u64,
}

/// Words copied into a segment before its pass: from segment `from` at word `src` to word
/// `dst`, `words` of them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Transfer {
    pub from: usize,
    pub src: u64,
    pub dst: u64,
    pub words: u64,
}

/// What a segment is made of.
pub(crate) struct SegmentSpec<'a, 'c> {
    pub words: u64,
    pub steps: &'a [Step],
    pub consts: &'a [(Slot, &'c [u8])],
    pub transfers: Vec<Transfer>,
}

/// Each step's parameter words at an offset the device can bind dynamically: the words, the
/// offsets, and the binding's size (the largest step's words).
fn param_layout(steps: &[Step], align: u64) -> Result<(Vec<u32>, Vec<u32>, u64), GpuFailure> {
    let binding = steps
        .iter()
        .map(|s| bytes_of(s.params.len() as u64))
        .max()
        .unwrap_or(4)
        .max(4);
    let mut words_out: Vec<u32> = Vec::new();
    let mut offsets = Vec::with_capacity(steps.len());
    for s in steps {
        let at = (bytes_of(words_out.len() as u64)).next_multiple_of(align);
        words_out.resize((at / 4) as usize, 0);
        offsets.push(u32::try_from(at).map_err(|_| GpuFailure::Refused)?);
        words_out.extend_from_slice(&s.params);
    }
    let total = (bytes_of(words_out.len() as u64))
        .next_multiple_of(align)
        .max(offsets.last().map_or(0, |&o| u64::from(o)) + binding);
    words_out.resize((total / 4) as usize, 0);
    Ok((words_out, offsets, binding))
}

fn bytes_of(words: u64) -> u64 {
    words * 4
}

fn device_err(e: impl ToString) -> GpuFailure {
    GpuFailure::Device(e.to_string())
}

impl Segment {
    fn new(inner: &Arc<Inner>, spec: &SegmentSpec<'_, '_>) -> Result<Self, GpuFailure> {
        let device = &inner.device;
        let size = bytes_of(spec.words).max(4);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pteron region"),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        for (slot, data) in spec.consts {
            if data.len() % 4 != 0 {
                // packed bytes: the device copies whole words
                let mut padded = data.to_vec();
                padded.resize(data.len().next_multiple_of(4), 0);
                inner
                    .queue
                    .write_buffer(&buffer, bytes_of(slot.off), &padded);
            } else if !data.is_empty() {
                inner.queue.write_buffer(&buffer, bytes_of(slot.off), data);
            }
        }
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pteron step parameters"),
            size: 4,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind_group = bind(inner, &params, &buffer, 4);
        let mut seg = Segment {
            buffer,
            params,
            bind_group,
            steps: Vec::new(),
            transfers: spec.transfers.clone(),
            params_bytes: 4,
            binding: 4,
        };
        seg.set_steps(inner, spec.steps)?;
        Ok(seg)
    }

    /// Replaces the steps: their parameters are rewritten in place, or in a new parameter
    /// buffer when they no longer fit.
    fn set_steps(&mut self, inner: &Arc<Inner>, steps: &[Step]) -> Result<(), GpuFailure> {
        let align = u64::from(inner.limits.min_storage_buffer_offset_alignment.max(4));
        let (words_out, offsets, binding) = param_layout(steps, align)?;
        // Every step's offset plus the bound size must lie inside the buffer.
        let reach = offsets.last().map_or(0, |&o| u64::from(o)) + binding.max(self.binding);
        let total = bytes_of(words_out.len() as u64).max(reach);
        if total > self.params_bytes || binding > self.binding {
            let size = total.max(self.params_bytes);
            let binding = binding.max(self.binding);
            let params = inner.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("pteron step parameters"),
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.bind_group = bind(inner, &params, &self.buffer, binding);
            self.params = params;
            self.params_bytes = size;
            self.binding = binding;
        }
        inner
            .queue
            .write_buffer(&self.params, 0, bytemuck::cast_slice(&words_out));
        // A run lowered again has the same kernels in the same order: keep their pipelines.
        self.steps.truncate(steps.len());
        for (k, (s, o)) in steps.iter().zip(offsets).enumerate() {
            match self.steps.get_mut(k) {
                Some(old) if old.0 == s.kernel => {
                    old.2 = o;
                    old.3 = s.grid;
                }
                slot => {
                    let step = (
                        s.kernel,
                        inner.pipeline(s.kernel).map_err(device_err)?,
                        o,
                        s.grid,
                    );
                    match slot {
                        Some(old) => *old = step,
                        None => self.steps.push(step),
                    }
                }
            }
        }
        Ok(())
    }
}

/// The bind group of a segment: the parameter words (a window of `binding` bytes at each
/// step's offset) and the segment's buffer.
fn bind(
    inner: &Inner,
    params: &wgpu::Buffer,
    buffer: &wgpu::Buffer,
    binding: u64,
) -> wgpu::BindGroup {
    inner.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("pteron region"),
        layout: inner.layout(),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: params,
                    offset: 0,
                    size: NonZeroU64::new(binding),
                }),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: buffer.as_entire_binding(),
            },
        ],
    })
}

impl GpuRegion {
    /// A region of one buffer.
    pub(crate) fn new(
        gpu: &Gpu,
        words: u64,
        steps: &[Step],
        consts: &[(Slot, &[u8])],
        inputs: Vec<(Slot, Dt)>,
        outputs: Vec<(Slot, Dt)>,
    ) -> Result<Self, GpuFailure> {
        let spec = SegmentSpec {
            words,
            steps,
            consts,
            transfers: Vec::new(),
        };
        Self::with_segments(
            gpu,
            &[spec],
            inputs.into_iter().map(|(s, d)| (0, s, d)).collect(),
            outputs.into_iter().map(|(s, d)| (0, s, d)).collect(),
        )
    }

    /// A region of several buffers (each at most the device's largest), run in order.
    pub(crate) fn with_segments(
        gpu: &Gpu,
        specs: &[SegmentSpec<'_, '_>],
        inputs: Vec<(usize, Slot, Dt)>,
        outputs: Vec<(usize, Slot, Dt)>,
    ) -> Result<Self, GpuFailure> {
        let inner = gpu.inner.clone();
        if specs
            .iter()
            .any(|s| bytes_of(s.words) > gpu.max_buffer_bytes())
        {
            return Err(GpuFailure::Refused);
        }
        let known = |seg: usize| seg < specs.len();
        if !inputs.iter().chain(&outputs).all(|&(g, ..)| known(g))
            || !specs
                .iter()
                .enumerate()
                .all(|(k, s)| s.transfers.iter().all(|t| t.from < k))
        {
            return Err(GpuFailure::Device(
                "a region's segments do not fit together".into(),
            ));
        }
        let segments = specs
            .iter()
            .map(|s| Segment::new(&inner, s))
            .collect::<Result<Vec<_>, _>>()?;
        let errors = bytes_of(segments.len() as u64);
        let out_bytes: u64 = errors
            + outputs
                .iter()
                .map(|(_, s, _)| bytes_of(s.words))
                .sum::<u64>();
        let readback = inner.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pteron readback"),
            size: out_bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if let Some(e) = inner.take_error() {
            return Err(GpuFailure::Device(e));
        }
        let bytes = specs.iter().map(|s| bytes_of(s.words)).sum::<u64>()
            + segments.iter().map(|s| s.params_bytes).sum::<u64>()
            + out_bytes;
        Ok(GpuRegion {
            gpu: inner,
            segments,
            inputs,
            outputs,
            readback,
            staging: Vec::new(),
            bytes,
            dynamic: false,
        })
    }

    /// Lets inputs hold fewer values than their homes (a graph with dynamic shapes).
    pub(crate) fn set_dynamic(&mut self) {
        self.dynamic = true;
    }

    /// Replaces every segment's steps (the same region lowered for other sizes).
    pub(crate) fn set_steps(&mut self, steps: &[Vec<Step>]) -> Result<(), GpuFailure> {
        if steps.len() != self.segments.len() {
            return Err(GpuFailure::Device(
                "steps for another count of segments".into(),
            ));
        }
        let inner = self.gpu.clone();
        for (seg, s) in self.segments.iter_mut().zip(steps) {
            let before = seg.params_bytes;
            seg.set_steps(&inner, s)?;
            self.bytes = self.bytes - before + seg.params_bytes;
        }
        Ok(())
    }

    fn run(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        let gpu = &self.gpu;
        for (k, &(seg, slot, dt)) in self.inputs.iter().enumerate() {
            let ([t], []) = ctx.io::<1, 0>([k], [])?;
            let words = to_words(t.info.dtype(), dt, t.bytes, &mut self.staging)
                .map_err(|m| KernelError::unsupported(format!("GPU region input {k}: {m}")))?;
            let fits = if self.dynamic {
                words.len() as u64 <= bytes_of(slot.words)
            } else {
                words.len() as u64 == bytes_of(slot.words)
            };
            if !fits {
                return Err(KernelError::shape(format!(
                    "GPU region input {k} has {} values, the region planned {}",
                    words.len() / 4,
                    slot.words
                )));
            }
            if !words.is_empty() {
                gpu.queue
                    .write_buffer(&self.segments[seg].buffer, bytes_of(slot.off), words);
            }
        }
        for seg in &self.segments {
            gpu.queue.write_buffer(&seg.buffer, 0, &[0; 4]);
        }
        let mut enc = gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        for seg in &self.segments {
            for t in &seg.transfers {
                let from = &self.segments[t.from].buffer;
                let n = bytes_of(t.words);
                if n > 0 {
                    enc.copy_buffer_to_buffer(
                        from,
                        bytes_of(t.src),
                        &seg.buffer,
                        bytes_of(t.dst),
                        n,
                    );
                }
            }
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: None,
            });
            for (_, pipeline, offset, [x, y, z]) in &seg.steps {
                if *x == 0 || *y == 0 || *z == 0 {
                    continue;
                }
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &seg.bind_group, &[*offset]);
                pass.dispatch_workgroups(*x, *y, *z);
            }
        }
        let rb = &self.readback;
        for (k, seg) in self.segments.iter().enumerate() {
            enc.copy_buffer_to_buffer(&seg.buffer, 0, rb, bytes_of(k as u64), 4);
        }
        let mut at = bytes_of(self.segments.len() as u64);
        for &(seg, s, _) in &self.outputs {
            let n = bytes_of(s.words);
            if n > 0 {
                enc.copy_buffer_to_buffer(&self.segments[seg].buffer, bytes_of(s.off), rb, at, n);
            }
            at += n;
        }
        gpu.queue.submit([enc.finish()]);
        let device_error = |m: String| KernelError::unsupported(format!("GPU: {m}"));
        let (tx, rx) = mpsc::channel();
        rb.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        gpu.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| device_error(e.to_string()))?;
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(device_error(e.to_string())),
            Err(_) => return Err(device_error("the readback was dropped".into())),
        }
        if let Some(e) = gpu.take_error() {
            rb.unmap();
            return Err(device_error(e));
        }
        let result = (|| {
            let view = rb
                .get_mapped_range(..)
                .map_err(|e| device_error(e.to_string()))?;
            let errors = bytes_of(self.segments.len() as u64) as usize;
            if view[..errors].iter().any(|&b| b != 0) {
                return Err(KernelError::invalid(
                    "an index read on the GPU is outside its dim",
                ));
            }
            let mut at = errors;
            let first = self.inputs.len();
            for (k, &(_, s, dt)) in self.outputs.iter().enumerate() {
                let n = bytes_of(s.words) as usize;
                let ([], [out]) = ctx.io::<0, 1>([], [first + k])?;
                from_words(&view[at..at + n], dt, out.info.dtype(), out.bytes)
                    .map_err(|m| KernelError::shape(format!("GPU region output {k}: {m}")))?;
                at += n;
            }
            Ok(())
        })();
        rb.unmap();
        result
    }
}

impl DelegateHandle for GpuRegion {
    fn check(&self, args: &ArgView<'_, '_>) -> Result<(), KernelError> {
        let (ins, outs) = (self.inputs.len(), self.outputs.len());
        if args.num_args() != ins + outs {
            // e.g. LFM2's Vulkan export: the graph outputs its new convolution state, the
            // program drops it, so the next call would start from the old one.
            return Err(KernelError::unsupported(format!(
                "GPU region: {ins} inputs and {outs} outputs, the call passes {} values (an \
                 output the program does not keep, such as a state to carry to the next \
                 call, is not supported)",
                args.num_args()
            )));
        }
        let slots = self.inputs.iter().chain(&self.outputs);
        for (k, &(_, slot, dt)) in slots.enumerate() {
            let t = args.tensor(k)?;
            let n = t.numel() as u64;
            let fits =
                n == slot.words || (self.dynamic && k < self.inputs.len() && n <= slot.words);
            if !host_dtype_fits(t.dtype(), dt) || !fits {
                return Err(KernelError::unsupported(format!(
                    "GPU region argument {k} is {} {:?}; the region planned {} {dt:?} values",
                    t.dtype(),
                    t.sizes(),
                    slot.words
                )));
            }
        }
        Ok(())
    }

    fn execute(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        self.run(ctx)
    }

    fn memory_bytes(&self) -> usize {
        usize::try_from(self.bytes).unwrap_or(usize::MAX)
    }
}

/// Host tensors of these dtypes map onto words of `dt` (int64 narrowed to int32, checked).
fn host_dtype_fits(host: ScalarType, dt: Dt) -> bool {
    matches!(
        (host, dt),
        (ScalarType::Float, Dt::F32)
            | (ScalarType::Int | ScalarType::Long, Dt::I32)
            | (ScalarType::Bool, Dt::Bool)
    )
}

/// The words of a host tensor: float32 and int32 as they are, int64 narrowed (an error if a
/// value does not fit), bools widened; converted ones go through `staging`.
fn to_words<'a>(
    host: ScalarType,
    dt: Dt,
    bytes: &'a [u8],
    staging: &'a mut Vec<u8>,
) -> Result<&'a [u8], String> {
    if !host_dtype_fits(host, dt) {
        return Err(format!("a {host} tensor where {dt:?} values are planned"));
    }
    match host {
        ScalarType::Long => {
            staging.clear();
            for v in bytes.chunks_exact(8) {
                let Ok(v) = <[u8; 8]>::try_from(v) else {
                    return Err("a ragged int64 tensor".into());
                };
                let v = i64::from_le_bytes(v);
                let v = i32::try_from(v).map_err(|_| format!("{v} does not fit int32"))?;
                staging.extend_from_slice(&v.to_le_bytes());
            }
            Ok(staging)
        }
        ScalarType::Bool => {
            staging.clear();
            for &b in bytes {
                staging.extend_from_slice(&u32::from(b != 0).to_le_bytes());
            }
            Ok(staging)
        }
        _ => Ok(bytes),
    }
}

/// Writes words back into a host tensor of dtype `host` (int32 widened to int64, words to
/// bools).
fn from_words(words: &[u8], dt: Dt, host: ScalarType, out: &mut [u8]) -> Result<(), String> {
    if !host_dtype_fits(host, dt) {
        return Err(format!("a {host} tensor where {dt:?} values are computed"));
    }
    let n = words.len() / 4;
    let want = n * host.elem_size();
    if out.len() != want {
        return Err(format!("{} bytes where {want} are computed", out.len()));
    }
    match host {
        ScalarType::Long => {
            for (o, w) in out.chunks_exact_mut(8).zip(words.chunks_exact(4)) {
                let Ok(w) = <[u8; 4]>::try_from(w) else {
                    return Err("ragged words".into());
                };
                let v = i32::from_le_bytes(w);
                o.copy_from_slice(&i64::from(v).to_le_bytes());
            }
        }
        ScalarType::Bool => {
            for (o, w) in out.iter_mut().zip(words.chunks_exact(4)) {
                *o = u8::from(w != [0; 4]);
            }
        }
        _ => out.copy_from_slice(words),
    }
    Ok(())
}
