//! What a region's buffer holds: homes for tensors (word offsets), what their words mean, and
//! the steps that read and write them.

use crate::kernels::Kernel;

/// Words at the start of every region's buffer that no tensor takes: word 0 is the error word
/// that index-reading kernels set (see `shaders/gather.wgsl`).
pub(crate) const RESERVED_WORDS: u64 = 1;

/// What a tensor's words hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dt {
    F32,
    /// int32 (the host side may hold int64 or int32).
    I32,
    /// 0 or 1 (the host side holds one byte each).
    Bool,
}

/// A home in the region's buffer: word offset and length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub off: u64,
    pub words: u64,
}

/// One dispatch: a kernel, its parameter words, its grid.
#[derive(Debug)]
pub(crate) struct Step {
    pub kernel: Kernel,
    pub params: Vec<u32>,
    pub grid: [u32; 3],
}
