//! A region on the device: one buffer, the steps' parameters, and the run (upload the inputs,
//! one compute pass with every step, copy the outputs to a mappable buffer, read them back).

use std::num::NonZeroU64;
use std::sync::{mpsc, Arc};

use pteron_core::{ArgAccess, ArgView, DelegateHandle, KernelContext, KernelError, ScalarType};

use crate::builder::{Slot, Step};
use crate::device::{Gpu, Inner};

/// Why a region was not made: the device cannot hold it (it stays on the CPU), or the device
/// failed.
pub(crate) enum GpuFailure {
    Refused,
    Device(String),
}

pub(crate) struct GpuRegion {
    gpu: Arc<Inner>,
    buffer: wgpu::Buffer,
    /// Kept alive for the bind group.
    _params: wgpu::Buffer,
    bind_group: wgpu::BindGroup,
    steps: Vec<(Arc<wgpu::ComputePipeline>, u32, [u32; 3])>,
    inputs: Vec<Slot>,
    outputs: Vec<Slot>,
    readback: Option<wgpu::Buffer>,
    bytes: u64,
}

fn bytes_of(words: u64) -> u64 {
    words * 4
}

impl GpuRegion {
    pub(crate) fn new(
        gpu: &Gpu,
        words: u64,
        steps: &[Step],
        consts: &[(Slot, &[u8])],
        inputs: Vec<Slot>,
        outputs: Vec<Slot>,
    ) -> Result<Self, GpuFailure> {
        let inner = gpu.inner.clone();
        let device = &inner.device;
        let size = bytes_of(words).max(4);
        if size > gpu.max_buffer_bytes() {
            return Err(GpuFailure::Refused);
        }
        let mut pipelines = Vec::with_capacity(steps.len());
        for s in steps {
            pipelines.push(
                inner
                    .pipeline(s.kernel)
                    .map_err(|e| GpuFailure::Device(e.to_string()))?,
            );
        }
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pteron region"),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        for (slot, data) in consts {
            if !data.is_empty() {
                inner.queue.write_buffer(&buffer, bytes_of(slot.off), data);
            }
        }
        // Each step's words at an offset the device can bind dynamically.
        let align = u64::from(inner.limits.min_storage_buffer_offset_alignment.max(4));
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
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pteron step parameters"),
            size: total,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        inner
            .queue
            .write_buffer(&params, 0, bytemuck::cast_slice(&words_out));
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("pteron region"),
            layout: inner.layout(),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &params,
                        offset: 0,
                        size: NonZeroU64::new(binding),
                    }),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: buffer.as_entire_binding(),
                },
            ],
        });
        let out_bytes: u64 = outputs.iter().map(|s| bytes_of(s.words)).sum();
        let readback = (out_bytes > 0).then(|| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("pteron readback"),
                size: out_bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        if let Some(e) = inner.take_error() {
            return Err(GpuFailure::Device(e));
        }
        Ok(GpuRegion {
            steps: pipelines
                .into_iter()
                .zip(offsets)
                .zip(steps)
                .map(|((p, o), s)| (p, o, s.grid))
                .collect(),
            bytes: size + total + out_bytes,
            gpu: inner,
            buffer,
            _params: params,
            bind_group,
            inputs,
            outputs,
            readback,
        })
    }

    fn run(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        let gpu = &self.gpu;
        for (k, slot) in self.inputs.iter().enumerate() {
            let ([t], []) = ctx.io::<1, 0>([k], [])?;
            if t.bytes.len() as u64 != bytes_of(slot.words) {
                return Err(KernelError::shape(format!(
                    "GPU region input {k} has {} bytes, the region planned {}",
                    t.bytes.len(),
                    bytes_of(slot.words)
                )));
            }
            if !t.bytes.is_empty() {
                gpu.queue
                    .write_buffer(&self.buffer, bytes_of(slot.off), t.bytes);
            }
        }
        let mut enc = gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: None,
            });
            for (pipeline, offset, [x, y, z]) in &self.steps {
                if *x == 0 || *y == 0 || *z == 0 {
                    continue;
                }
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &self.bind_group, &[*offset]);
                pass.dispatch_workgroups(*x, *y, *z);
            }
        }
        let mut at = 0;
        if let Some(rb) = &self.readback {
            for s in &self.outputs {
                let n = bytes_of(s.words);
                if n > 0 {
                    enc.copy_buffer_to_buffer(&self.buffer, bytes_of(s.off), rb, at, n);
                }
                at += n;
            }
        }
        gpu.queue.submit([enc.finish()]);
        let device_error = |m: String| KernelError::unsupported(format!("GPU: {m}"));
        let Some(rb) = &self.readback else {
            return match gpu.take_error() {
                Some(e) => Err(device_error(e)),
                None => Ok(()),
            };
        };
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
            let mut at = 0usize;
            let first = self.inputs.len();
            for (k, s) in self.outputs.iter().enumerate() {
                let n = bytes_of(s.words) as usize;
                let ([], [out]) = ctx.io::<0, 1>([], [first + k])?;
                let dst = out.bytes;
                if dst.len() != n {
                    return Err(KernelError::shape(format!(
                        "GPU region output {k} has {} bytes, the region computed {n}",
                        dst.len()
                    )));
                }
                dst.copy_from_slice(&view[at..at + n]);
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
        let slots = self.inputs.iter().chain(&self.outputs);
        for (k, slot) in slots.enumerate() {
            let t = args.tensor(k)?;
            if t.dtype() != ScalarType::Float || t.numel() as u64 != slot.words {
                return Err(KernelError::unsupported(format!(
                    "GPU region argument {k} is {} {:?}; the region planned {} float32 values",
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
