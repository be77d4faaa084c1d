//! `--device cpu|gpu|auto` and `pteron devices`: where a program's float32 calls run. The GPU
//! engine (`pteron-gpu`, on wgpu) is in builds with the `gpu` feature (the default).

use std::sync::Arc;

use pteron::Result;

#[derive(Clone, Copy, Debug, Default, PartialEq, clap::ValueEnum)]
pub enum Device {
    /// The CPU kernels only.
    #[default]
    Cpu,
    /// The GPU engine takes every run of calls it has kernels for; an error if no GPU opens.
    Gpu,
    /// The GPU when one opens, else the CPU.
    Auto,
}

/// The flags every command that runs a program takes.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DeviceArgs {
    /// Where float32 calls run: `cpu`, `gpu` (the GPU engine takes every run of calls it has
    /// kernels for, the rest stays on the CPU) or `auto` (the GPU when one opens).
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// With `--device gpu|auto`: the first adapter whose name contains this text (see
    /// `pteron devices`); default: the best one.
    #[arg(long)]
    pub adapter: Option<String>,
}

/// What the GPU engine adds to a runtime: the partitioner for portable calls, the backends
/// with ExecuTorch's Vulkan delegate, and the adapter's name.
pub struct GpuParts {
    partitioner: Arc<dyn pteron::Partitioner>,
    backends: pteron::BackendRegistry,
    name: String,
}

/// The GPU engine to install for `args`; `None` on the CPU.
#[cfg(feature = "gpu")]
pub fn gpu_partitioner(args: &DeviceArgs) -> Result<Option<GpuParts>> {
    use pteron_gpu::{Gpu, GpuOptions, GpuPartitioner, VulkanBackend};
    if args.device == Device::Cpu {
        return Ok(None);
    }
    let options = GpuOptions {
        adapter: args.adapter.clone(),
        ..GpuOptions::default()
    };
    match Gpu::open(&options) {
        Ok(gpu) => {
            let name = format!("{} ({})", gpu.adapter().name, gpu.adapter().backend);
            let mut backends = pteron::default_backends();
            backends.register(Arc::new(VulkanBackend::new(gpu.clone())));
            Ok(Some(GpuParts {
                partitioner: Arc::new(GpuPartitioner::new(gpu)),
                backends,
                name,
            }))
        }
        Err(e) if args.device == Device::Auto => {
            eprintln!("note: running on the CPU: {e}");
            Ok(None)
        }
        Err(e) => Err(pteron::Error::Invalid(e.to_string())),
    }
}

#[cfg(not(feature = "gpu"))]
pub fn gpu_partitioner(args: &DeviceArgs) -> Result<Option<GpuParts>> {
    match args.device {
        Device::Cpu | Device::Auto => Ok(None),
        Device::Gpu => Err(pteron::Error::Invalid(
            "this pteron was built without the `gpu` feature".into(),
        )),
    }
}

/// Adds the GPU engine of `args` to `builder` (the channels-last CPU engine and the fused CPU
/// blocks off, so that the GPU sees the convolutions and the calls around them; Vulkan
/// delegates run on it); returns the adapter's name when there is one.
pub fn install(
    builder: pteron::RuntimeBuilder,
    args: &DeviceArgs,
) -> Result<(pteron::RuntimeBuilder, Option<String>)> {
    Ok(match gpu_partitioner(args)? {
        Some(parts) => (
            builder
                .channels_last(false)
                .blocks(false)
                .partitioner(parts.partitioner)
                .backends(parts.backends),
            Some(parts.name),
        ),
        None => (builder, None),
    })
}

/// A runtime with the GPU engine of `args` (see [`install`]) and the adapter's name.
pub fn runtime(args: &DeviceArgs) -> Result<(pteron::Runtime, Option<String>)> {
    let (builder, adapter) = install(pteron::Runtime::builder(), args)?;
    Ok((builder.build()?, adapter))
}

/// `e` with a hint when it is a Vulkan program loaded without a GPU.
pub fn vulkan_hint<E: std::fmt::Display + From<pteron::Error>>(e: E, adapter: Option<&str>) -> E {
    let text = e.to_string();
    if text.contains("\"VulkanBackend\"") && adapter.is_none() {
        pteron::Error::Invalid(format!("{text} (Vulkan delegates run with --device gpu)")).into()
    } else {
        e
    }
}

/// `pteron devices`: the GPU adapters this build finds, best first.
pub fn devices(json: bool) -> Result<()> {
    #[cfg(feature = "gpu")]
    let list = pteron_gpu::adapters();
    #[cfg(not(feature = "gpu"))]
    let list: Vec<Adapter> = Vec::new();
    if json {
        let rows: Vec<serde_json::Value> = list
            .iter()
            .map(|a| {
                serde_json::json!({
                    "name": a.name, "kind": a.kind, "backend": a.backend,
                    "driver": a.driver, "vendor": a.vendor, "device": a.device,
                })
            })
            .collect();
        let doc = serde_json::json!({ "gpu": cfg!(feature = "gpu"), "adapters": rows });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON of strings")
        );
        return Ok(());
    }
    if !cfg!(feature = "gpu") {
        println!("this pteron was built without the `gpu` feature");
    }
    for (k, a) in list.iter().enumerate() {
        println!(
            "{k}: {} [{}, {}] driver: {}",
            a.name,
            a.kind,
            a.backend,
            if a.driver.is_empty() { "-" } else { &a.driver }
        );
    }
    println!("{} GPU adapter(s)", list.len());
    Ok(())
}

#[cfg(not(feature = "gpu"))]
struct Adapter {
    name: String,
    kind: String,
    backend: String,
    driver: String,
    vendor: u32,
    device: u32,
}

/// `pteron ops --device gpu`: the operators the GPU engine runs (float32).
pub fn gpu_ops(json: bool) -> Result<()> {
    #[cfg(feature = "gpu")]
    let claims: &[&str] = pteron_gpu::CLAIMS;
    #[cfg(not(feature = "gpu"))]
    let claims: &[&str] = &[];
    if json {
        let doc =
            serde_json::json!({ "device": "gpu", "dtypes": ["float32"], "operators": claims });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON of strings")
        );
        return Ok(());
    }
    for op in claims {
        println!("{op}  float32");
    }
    println!("{} operators on the GPU", claims.len());
    Ok(())
}
