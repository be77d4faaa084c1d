//! pteron's GPU engine, on wgpu (Vulkan, Metal, DX12; Mesa's lavapipe in CI).
//!
//! - [`Gpu::open`] picks an adapter ([`adapters`] lists them) and opens its device.
//! - [`GpuPartitioner`] takes the runs of a portable program's float32 calls that the engine
//!   has kernels for ([`CLAIMS`]) and runs each run as one region: one buffer on the device
//!   for its constants, inputs, intermediates and outputs, one compute pass per run, the
//!   inputs uploaded before it and the values the rest of the program reads copied back after.
//!   Everything else stays on the CPU kernels, so every program runs.
//! - The kernels are WGSL (`src/shaders/`), one entry point each, written from the portable
//!   kernels' definitions; `lower.rs` maps each call onto them.
//!
//! Install it with `pteron::RuntimeBuilder::partitioner` (with `channels_last(false)` and
//! `blocks(false)`, so the convolutions and the rotary blocks are not taken by the CPU's
//! channels-last engine or fused blocks first).

mod builder;
mod device;
mod emit;
mod error;
mod kernels;
mod lower;
mod partition;
mod region;
mod vulkan;
mod words;

pub use device::{adapters, AdapterSummary, Gpu, GpuOptions};
pub use error::GpuError;
pub use lower::CLAIMS;
pub use partition::GpuPartitioner;
pub use vulkan::VulkanBackend;
