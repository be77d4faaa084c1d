//! Registered kernels: what a kernel declares besides its run function (load-time check and
//! prepare steps, dtypes, arguments it writes in place), and the registry that maps operator
//! names to kernels.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};

use crate::dtype::DtypeSet;
use crate::kernel::{CheckFn, KernelFn};
use crate::prepare::PrepareFn;

/// A set of argument positions (below [`ArgSet::CAPACITY`]) a kernel declares something about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgSet(u64);

impl ArgSet {
    pub const EMPTY: ArgSet = ArgSet(0);
    /// One past the largest position a set can hold.
    pub const CAPACITY: usize = 64;

    /// The set of `args`; panics (at compile time in a `const`) on a position past
    /// [`ArgSet::CAPACITY`].
    pub const fn of(args: &[usize]) -> Self {
        let mut mask = 0u64;
        let mut i = 0;
        while i < args.len() {
            assert!(args[i] < Self::CAPACITY, "argument position out of range");
            mask |= 1 << args[i];
            i += 1;
        }
        ArgSet(mask)
    }
    pub const fn union(self, other: ArgSet) -> Self {
        ArgSet(self.0 | other.0)
    }
    pub const fn contains(self, arg: usize) -> bool {
        arg < Self::CAPACITY && self.0 & (1 << arg) != 0
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The positions, in increasing order.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..Self::CAPACITY).filter(move |&i| self.contains(i))
    }
}

/// One registered kernel: the function that runs it, an optional load-time check (dtypes,
/// argument kinds) so that unsupported calls fail at method load rather than mid-run, an
/// optional load-time `prepare` (per-call-site state such as packed weights; see
/// [`crate::prepare`]), the dtypes it declares it computes in (the check is what enforces
/// them; this is for listings), and the arguments it writes in place.
#[derive(Clone, Copy)]
pub struct Kernel {
    pub run: KernelFn,
    pub check: Option<CheckFn>,
    pub prepare: Option<PrepareFn>,
    pub dtypes: DtypeSet,
    /// Arguments the kernel writes in place, besides its out arguments and return slot: the
    /// method may not take their contents as unchanged by the call (`aten::copy_`'s
    /// destination, a KV cache).
    pub writes: ArgSet,
    /// Of [`Kernel::writes`], the arguments that are caches: state the kernel updates from
    /// run to run (KV caches), which a runner may save and restore
    /// ([`crate::Method::cache_tensors`]).
    pub caches: ArgSet,
}

impl Kernel {
    pub const fn new(run: KernelFn) -> Self {
        Kernel {
            run,
            check: None,
            prepare: None,
            dtypes: DtypeSet::EMPTY,
            writes: ArgSet::EMPTY,
            caches: ArgSet::EMPTY,
        }
    }
    pub const fn with_check(run: KernelFn, check: CheckFn) -> Self {
        Kernel {
            check: Some(check),
            ..Kernel::new(run)
        }
    }
    /// Adds a load-time `prepare` step, run once per call site after the check.
    pub const fn with_prepare(mut self, prepare: PrepareFn) -> Self {
        self.prepare = Some(prepare);
        self
    }
    /// Declares the dtypes this kernel computes in (the dtype of its main tensor argument).
    pub const fn dtypes(mut self, dtypes: DtypeSet) -> Self {
        self.dtypes = dtypes;
        self
    }
    /// Declares that the kernel writes arguments `args` in place (see [`Kernel::writes`]).
    pub const fn writes_in_place(mut self, args: &[usize]) -> Self {
        self.writes = self.writes.union(ArgSet::of(args));
        self
    }
    /// Declares that arguments `args` are caches the kernel updates in place (see
    /// [`Kernel::caches`]); they are written in place too.
    pub const fn caches(mut self, args: &[usize]) -> Self {
        let set = ArgSet::of(args);
        self.writes = self.writes.union(set);
        self.caches = self.caches.union(set);
        self
    }
    /// `self` as the implementation of an op that `base` already declares: `self`'s run and
    /// prepare steps with `base`'s check and dtypes, and the arguments either writes in place
    /// (what an op writes does not change with the kernel that runs it).
    pub const fn over(self, base: &Kernel) -> Self {
        Kernel {
            run: self.run,
            check: base.check,
            prepare: self.prepare,
            dtypes: base.dtypes,
            writes: base.writes.union(self.writes),
            caches: base.caches.union(self.caches),
        }
    }
}

/// A compile-time choice of operators for selective builds: a kernel library's
/// `register::<S>` installs only the operators `S` selects and leaves the others' kernels
/// unreferenced, so the linker drops their code (a firmware carries only what its programs
/// call). [`AllOps`] selects everything; `pteron ops --emit-rust a.pte …` writes a selection
/// for given programs.
pub trait OpSelection {
    /// The selected operator names (`aten::add.out`), or `None` for every operator.
    const OPS: Option<&'static [&'static str]>;
}

/// Every operator.
pub struct AllOps;

impl OpSelection for AllOps {
    const OPS: Option<&'static [&'static str]> = None;
}

/// Whether `ops` (an [`OpSelection::OPS`]) holds `name`; `const` so that [`register_op!`]
/// decides at compile time.
pub const fn selects(ops: Option<&[&str]>, name: &str) -> bool {
    let Some(ops) = ops else { return true };
    let mut i = 0;
    while i < ops.len() {
        let (a, b) = (ops[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return true;
            }
        }
        i += 1;
    }
    false
}

/// `register_op!(S, registry, "aten::relu.out", kernel)` registers `kernel` when the
/// [`OpSelection`] `S` selects the name. The name must be a constant (a literal or `concat!`):
/// the choice is made at compile time, and a kernel left out is never referenced.
#[macro_export]
macro_rules! register_op {
    ($sel:ty, $registry:expr, $name:expr, $kernel:expr $(,)?) => {
        if const { $crate::registry::selects(<$sel as $crate::registry::OpSelection>::OPS, $name) }
        {
            $registry.register($name, $kernel);
        }
    };
}

/// Operator name (`aten::add.out`) → kernel. A plain table: later registrations replace
/// earlier ones, so a faster library registers over the portable one.
#[derive(Clone, Default)]
pub struct KernelRegistry {
    kernels: BTreeMap<String, Kernel>,
}

impl KernelRegistry {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn register(&mut self, name: &str, kernel: Kernel) {
        self.kernels.insert(name.to_string(), kernel);
    }
    pub fn get(&self, name: &str) -> Option<&Kernel> {
        self.kernels.get(name)
    }
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.kernels.keys().map(|s| s.as_str())
    }
    /// Every kernel with its name, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Kernel)> {
        self.kernels.iter().map(|(n, k)| (n.as_str(), k))
    }
    pub fn len(&self) -> usize {
        self.kernels.len()
    }
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::KernelError;
    use crate::kernel::KernelContext;

    fn nothing(_: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        Ok(())
    }

    struct Two;
    impl OpSelection for Two {
        const OPS: Option<&'static [&'static str]> = Some(&["aten::relu.out", "aten::add.out"]);
    }

    fn install<S: OpSelection>(r: &mut KernelRegistry) {
        register_op!(S, r, "aten::relu.out", Kernel::new(nothing));
        register_op!(S, r, "aten::add.out", Kernel::new(nothing));
        register_op!(S, r, "aten::add.Scalar_out", Kernel::new(nothing));
        register_op!(
            S,
            r,
            concat!("aten::", "relu", "_.out"),
            Kernel::new(nothing)
        );
    }

    #[test]
    fn selections() {
        let (mut all, mut two) = (KernelRegistry::new(), KernelRegistry::new());
        install::<AllOps>(&mut all);
        install::<Two>(&mut two);
        assert_eq!(all.len(), 4);
        assert_eq!(
            two.names().collect::<alloc::vec::Vec<_>>(),
            ["aten::add.out", "aten::relu.out"]
        );
        assert!(!selects(Some(&["aten::add"]), "aten::add.out"));
        assert!(!selects(Some(&[]), "aten::add.out"));
        assert!(selects(None, ""));
    }

    #[test]
    fn arg_sets() {
        let s = ArgSet::of(&[4, 1, 63]);
        assert!(s.contains(1) && s.contains(4) && s.contains(63));
        assert!(!s.contains(0) && !s.contains(64) && !s.contains(usize::MAX));
        assert_eq!(s.iter().collect::<alloc::vec::Vec<_>>(), [1, 4, 63]);
        assert!(ArgSet::EMPTY.is_empty() && !s.is_empty());
    }

    /// Caches are written in place too, and a kernel registered over another keeps what the
    /// op writes.
    #[test]
    fn in_place_writes_survive_an_override() {
        let base = Kernel::new(nothing).writes_in_place(&[0]).caches(&[3, 4]);
        assert_eq!(base.writes, ArgSet::of(&[0, 3, 4]));
        assert_eq!(base.caches, ArgSet::of(&[3, 4]));
        let fast = Kernel::new(nothing).over(&base);
        assert_eq!((fast.writes, fast.caches), (base.writes, base.caches));
    }
}
