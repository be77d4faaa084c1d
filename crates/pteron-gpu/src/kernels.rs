//! The WGSL kernels. Each is one compute entry point over the same two bindings (the step's
//! parameter words, the region's buffer), so one pipeline layout serves them all and a
//! region's steps differ only in pipeline, parameter offset and grid.

const PRELUDE: &str = include_str!("shaders/prelude.wgsl");
/// Workgroup tree reductions, for the kernels with a workgroup per row or output.
const TREE: &str = include_str!("shaders/tree.wgsl");

/// A compute kernel of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Binary,
    Unary,
    Copy,
    Matmul,
    Conv2d,
    Rows,
    Reduce,
    Channel,
    Pool,
    Ints,
    Gather,
    Rope,
    Attend,
    Linear4,
    Gemv,
}

impl Kernel {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kernel::Binary => "binary",
            Kernel::Unary => "unary",
            Kernel::Copy => "copy",
            Kernel::Matmul => "matmul",
            Kernel::Conv2d => "conv2d",
            Kernel::Rows => "rows",
            Kernel::Reduce => "reduce",
            Kernel::Channel => "channel",
            Kernel::Pool => "pool",
            Kernel::Ints => "ints",
            Kernel::Gather => "gather",
            Kernel::Rope => "rope",
            Kernel::Attend => "attend",
            Kernel::Linear4 => "linear4",
            Kernel::Gemv => "gemv",
        }
    }

    /// The kernel's full WGSL module (the shared prelude, the reductions where it uses them,
    /// then its own body).
    pub(crate) fn source(self) -> String {
        let body = match self {
            Kernel::Binary => include_str!("shaders/binary.wgsl"),
            Kernel::Unary => include_str!("shaders/unary.wgsl"),
            Kernel::Copy => include_str!("shaders/copy.wgsl"),
            Kernel::Matmul => include_str!("shaders/matmul.wgsl"),
            Kernel::Conv2d => include_str!("shaders/conv2d.wgsl"),
            Kernel::Rows => include_str!("shaders/rows.wgsl"),
            Kernel::Reduce => include_str!("shaders/reduce.wgsl"),
            Kernel::Channel => include_str!("shaders/channel.wgsl"),
            Kernel::Pool => include_str!("shaders/pool.wgsl"),
            Kernel::Ints => include_str!("shaders/ints.wgsl"),
            Kernel::Gather => include_str!("shaders/gather.wgsl"),
            Kernel::Rope => include_str!("shaders/rope.wgsl"),
            Kernel::Attend => include_str!("shaders/attend.wgsl"),
            Kernel::Linear4 => include_str!("shaders/linear4.wgsl"),
            Kernel::Gemv => include_str!("shaders/gemv.wgsl"),
        };
        let tree = match self {
            Kernel::Rows | Kernel::Attend | Kernel::Gemv => TREE,
            _ => "",
        };
        format!("{PRELUDE}\n{tree}\n{body}")
    }
}

/// Most workgroups along one grid dimension (WebGPU's guaranteed limit).
pub(crate) const MAX_GROUPS: u32 = 65535;

/// A grid of 256-wide workgroups covering `n` invocations (the kernels' `lin` index), or
/// `None` when even a 2-d grid is too small.
pub(crate) fn elementwise_grid(n: u64) -> Option<[u32; 3]> {
    groups_2d(n.div_ceil(256))
}

/// A grid with one workgroup per item, spread over two dimensions.
pub(crate) fn groups_2d(items: u64) -> Option<[u32; 3]> {
    if items == 0 {
        return Some([0, 0, 0]);
    }
    let x = items.min(u64::from(MAX_GROUPS));
    let y = items.div_ceil(x);
    (y <= u64::from(MAX_GROUPS)).then_some([x as u32, y as u32, 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_cover_their_range() {
        assert_eq!(elementwise_grid(0), Some([0, 0, 0]));
        assert_eq!(elementwise_grid(1), Some([1, 1, 1]));
        assert_eq!(elementwise_grid(256 * 65535), Some([65535, 1, 1]));
        let [x, y, _] = elementwise_grid(256 * 65535 + 1).unwrap();
        assert!(u64::from(x) * u64::from(y) * 256 > 256 * 65535);
        assert_eq!(groups_2d(65535 * 65535 + 1), None);
    }
}
