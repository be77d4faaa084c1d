//! Opening a GPU: adapter listing and selection, the device and its queue, the compiled
//! kernels (one pipeline each, made on first use and shared by every region on the device).

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};

use crate::error::GpuError;
use crate::kernels::Kernel;

/// Which adapter [`Gpu::open`] takes.
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    /// The first adapter whose name contains this text (case-insensitive); `None`: the
    /// best one (a discrete GPU before an integrated one before a CPU emulation).
    pub adapter: Option<String>,
    /// The largest buffer the engine makes, in bytes, when less than the device allows (a
    /// graph larger than it runs in several buffers, its values copied between them).
    pub max_buffer_bytes: Option<u64>,
}

/// What an adapter says about itself (`pteron devices`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterSummary {
    pub name: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu` (e.g. Mesa's lavapipe) or `Other`.
    pub kind: String,
    /// `Vulkan`, `Metal` or `Dx12`.
    pub backend: String,
    pub driver: String,
    pub vendor: u32,
    pub device: u32,
}

impl AdapterSummary {
    fn of(info: &wgpu::AdapterInfo) -> Self {
        AdapterSummary {
            name: info.name.clone(),
            kind: format!("{:?}", info.device_type),
            backend: format!("{:?}", info.backend),
            driver: [info.driver.as_str(), info.driver_info.as_str()]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" "),
            vendor: info.vendor,
            device: info.device,
        }
    }
}

fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle())
}

/// Every adapter the GPU backends this build has find on this machine, best first.
pub fn adapters() -> Vec<AdapterSummary> {
    ranked(pollster::block_on(
        instance().enumerate_adapters(wgpu::Backends::all()),
    ))
    .iter()
    .map(|a| AdapterSummary::of(&a.get_info()))
    .collect()
}

fn rank(kind: wgpu::DeviceType) -> u8 {
    match kind {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn ranked(mut list: Vec<wgpu::Adapter>) -> Vec<wgpu::Adapter> {
    list.sort_by_key(|a| rank(a.get_info().device_type));
    list
}

/// An open GPU: cheap to clone (the device is shared), `Send + Sync`.
#[derive(Clone)]
pub struct Gpu {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) summary: AdapterSummary,
    pub(crate) limits: wgpu::Limits,
    layout: wgpu::BindGroupLayout,
    pipeline_layout: wgpu::PipelineLayout,
    pipelines: Mutex<HashMap<Kernel, Arc<wgpu::ComputePipeline>>>,
    /// The first error the device reported outside any call that checks for one.
    errors: Arc<Mutex<Option<String>>>,
    /// `GpuOptions::max_buffer_bytes`.
    buffer_cap: Option<u64>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("adapter", &self.inner.summary)
            .finish()
    }
}

impl Gpu {
    /// Opens the adapter `options` name (or the best one) with its own limits.
    pub fn open(options: &GpuOptions) -> Result<Gpu, GpuError> {
        let list = ranked(pollster::block_on(
            instance().enumerate_adapters(wgpu::Backends::all()),
        ));
        let wanted = options.adapter.as_ref().map(|s| s.to_lowercase());
        let adapter = list
            .into_iter()
            .find(|a| match &wanted {
                Some(w) => a.get_info().name.to_lowercase().contains(w),
                None => true,
            })
            .ok_or_else(|| GpuError::NoAdapter {
                wanted: options.adapter.clone(),
            })?;
        let summary = AdapterSummary::of(&adapter.get_info());
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("pteron"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| GpuError::RequestDevice {
            adapter: summary.name.clone(),
            message: e.to_string(),
        })?;
        // Validation errors outside an error scope would otherwise panic inside wgpu.
        let errors = Arc::new(Mutex::new(None));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut slot) = sink.lock() {
                slot.get_or_insert_with(|| e.to_string());
            }
        }));
        let storage = |binding, read_only, dynamic| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: dynamic,
                min_binding_size: NonZeroU64::new(4),
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("pteron step"),
            entries: &[storage(0, true, true), storage(1, false, false)],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("pteron step"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        Ok(Gpu {
            inner: Arc::new(Inner {
                device,
                queue,
                summary,
                limits,
                layout,
                pipeline_layout,
                pipelines: Mutex::new(HashMap::new()),
                errors,
                buffer_cap: options.max_buffer_bytes,
            }),
        })
    }

    /// The adapter this device was opened on.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.inner.summary
    }

    /// Most bytes one region's buffer may have on this device.
    pub fn max_buffer_bytes(&self) -> u64 {
        let l = &self.inner.limits;
        let device = l.max_buffer_size.min(l.max_storage_buffer_binding_size);
        self.inner.buffer_cap.map_or(device, |c| c.clamp(4, device))
    }
}

impl Inner {
    pub(crate) fn layout(&self) -> &wgpu::BindGroupLayout {
        &self.layout
    }

    /// The compiled pipeline of `kernel`, made on first use.
    pub(crate) fn pipeline(&self, kernel: Kernel) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        let mut map = self
            .pipelines
            .lock()
            .map_err(|_| GpuError::Device("pipeline cache poisoned".into()))?;
        if let Some(p) = map.get(&kernel) {
            return Ok(p.clone());
        }
        let source = kernel.source();
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(kernel.name()),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(kernel.name()),
                layout: Some(&self.pipeline_layout),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Device(format!("kernel {}: {e}", kernel.name())));
        }
        let p = Arc::new(pipeline);
        map.insert(kernel, p.clone());
        Ok(p)
    }

    /// The first error the device reported since the last call, if any.
    pub(crate) fn take_error(&self) -> Option<String> {
        self.errors.lock().ok().and_then(|mut e| e.take())
    }
}
