//! How the engine runs a graph, chosen by whoever builds it (the backend, the partitioner,
//! through `pteron::MethodOptions`).

use std::sync::Arc;

use crate::profile::NodeProfile;

/// Which chains of nodes the engine fuses at init ([`crate::kernels::fused`] and residual
/// adds as GEMM epilogues). Outputs are the same under every policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FusePolicy {
    /// No fusion: every node runs on its own (to set nodes beside ExecuTorch's profile).
    Off,
    /// Chains whose intermediate map is at least 1 MiB (smaller ones stay in the L2 cache
    /// between the nodes anyway).
    #[default]
    Default,
    /// Chains at any size (tests).
    All,
}

/// Options of an [`crate::Executable`].
#[derive(Clone, Debug, Default)]
pub struct EngineOptions {
    pub fuse: FusePolicy,
    /// Time every node into this collector (each graph adds its rows at init).
    pub profile: Option<Arc<NodeProfile>>,
}

impl EngineOptions {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn fuse(mut self, fuse: FusePolicy) -> Self {
        self.fuse = fuse;
        self
    }
    pub fn profile(mut self, profile: Arc<NodeProfile>) -> Self {
        self.profile = Some(profile);
        self
    }
}
