//! The GPU engine's errors.

use thiserror::Error;

/// Why a GPU could not be opened or a region could not run on it.
#[derive(Debug, Error)]
pub enum GpuError {
    /// No adapter of the kind asked for (or none at all: no driver, no device).
    #[error("no GPU adapter found{}", match .wanted { Some(w) => format!(" matching {w:?}"), None => String::new() })]
    NoAdapter { wanted: Option<String> },
    /// The adapter refused to open a device.
    #[error("the GPU adapter {adapter:?} refused to open a device: {message}")]
    RequestDevice { adapter: String, message: String },
    /// The device reported an error (validation, out of memory, lost device).
    #[error("GPU device error: {0}")]
    Device(String),
    /// Reading results back from the device failed.
    #[error("reading GPU results back failed: {0}")]
    Readback(String),
    /// A region needs more memory in one buffer than the device allows.
    #[error("a GPU region needs {bytes} bytes in one buffer; the device allows {limit}")]
    TooLarge { bytes: u64, limit: u64 },
}
