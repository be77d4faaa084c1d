//! A loaded method: the [`Method`] the load stages build, its accessors, inputs, outputs and
//! state. Loading is a sequence of stages, each in a module of its own:
//!
//! 1. the memory plan ([`crate::load::arenas`]) and values ([`crate::load::values`]);
//! 2. operators, delegates and instructions ([`crate::load::instructions`],
//!    [`crate::load::delegates`]);
//! 3. partitioning ([`crate::partition`]) and planning ([`crate::plan`]).
//!
//! Everything read from the file is checked there, once. Running a method is
//! [`crate::execute`]: it only reads the prepared tables and allocates nothing.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;

use pteron_format::Program;

use crate::analysis::{Boundary, Pass};
use crate::backend::DelegateHandle;
use crate::config::MethodConfig;
use crate::dtype::ScalarType;
use crate::error::{Error, KernelError, Result};
use crate::instr::{Delegates, Instr, Op};
use crate::kernel::{ArgView, TensorRef};
use crate::load::arenas::{ArenaLayout, MemoryNeeds};
use crate::load::{delegates, instructions, values};
use crate::memory::Arena;
use crate::options::LoadOptions;
use crate::parallel::Parallel;
use crate::partition::partition_calls;
use crate::plan::{plan_calls, PlanStats, Planned};
use crate::prepare::Prepared;
use crate::registry::{Kernel, KernelRegistry};
use crate::source::DataSources;
use crate::value::{Dynamism, ListPool, Storage, Tensor, Value};

// Paths of items that used to live here.
pub use crate::load::instructions::operator_name;
pub use crate::load::values::parse_tensor_info;

/// A loaded method, ready to run. Borrows constants from the program's bytes.
pub struct Method<'p> {
    pub(crate) name: String,
    pub(crate) values: Vec<Value<'p>>,
    pub(crate) pool: ListPool,
    pub(crate) arenas: Vec<Arena<'p>>,
    /// The arena of tensors the plan leaves unplanned (user inputs and outputs); arenas after
    /// it hold values that load-time planning gave memory of their own.
    pub(crate) io_arena: u32,
    /// Instruction arguments (value indices).
    pub(crate) args: Vec<u32>,
    pub(crate) chains: Vec<Vec<Instr>>,
    pub(crate) ops: Vec<Op>,
    pub(crate) inputs: Vec<u32>,
    pub(crate) outputs: Vec<u32>,
    /// Each input's declared (upper-bound) metadata.
    pub(crate) input_specs: Vec<Value<'p>>,
    pub(crate) config: MethodConfig,
    pub(crate) instructions_run: u64,
    pub(crate) states: Vec<Prepared>,
    pub(crate) scratch: Arena<'p>,
    pub(crate) parallel: Option<Arc<dyn Parallel + Send + Sync>>,
    pub(crate) plan_stats: PlanStats,
    /// Initialised delegates, in the plan's delegate order, then the partitioners' regions.
    pub(crate) delegates: Vec<Box<dyn DelegateHandle + 'p>>,
    /// Each delegate's name for errors and observers (`"<backend id> delegate <i>"`).
    pub(crate) delegate_names: Vec<String>,
}

impl<'p> Method<'p> {
    /// Loads the plan named `name` of `program`, resolving its operators in `registry`.
    pub fn load(
        program: &Program<'p>,
        name: &str,
        registry: &KernelRegistry,
        config: MethodConfig,
    ) -> Result<Self> {
        Self::load_with_data(DataSources::program(*program), name, registry, config)
    }

    pub fn load_with_data(
        src: DataSources<'p>,
        name: &str,
        registry: &KernelRegistry,
        config: MethodConfig,
    ) -> Result<Self> {
        Self::load_with_options(src, name, registry, config.into())
    }

    /// Loads a method with explicit options (threads, preparation): decodes the memory plan
    /// and values, resolves operators, initialises delegates, decodes instructions, then
    /// partitions and plans the calls.
    pub fn load_with_options(
        src: DataSources<'p>,
        name: &str,
        registry: &KernelRegistry,
        options: LoadOptions,
    ) -> Result<Self> {
        Self::load_impl(src, name, registry, options, None)
    }

    /// Loads a method whose planned memory (the arenas [`Method::memory_needs`] reports) is
    /// carved from `memory` instead of allocated, as ExecuTorch's `MemoryManager` takes it:
    /// firmware places it where it wants (a static buffer, a given SRAM bank). The heap then
    /// holds only the runtime's own tables. Fails with [`Error::ResourceLimit`] naming the
    /// bytes needed when `memory` is too small. (Load-time planning's extra buffers, with the
    /// `plan` feature, are still allocated.)
    pub fn load_in(
        src: DataSources<'p>,
        name: &str,
        registry: &KernelRegistry,
        options: LoadOptions,
        memory: &'p mut [u8],
    ) -> Result<Self> {
        Self::load_impl(src, name, registry, options, Some(memory))
    }

    /// The planned memory loading `name` needs (each arena, and a lent region that holds
    /// them), read from the plan and the values without loading the method.
    pub fn memory_needs(
        src: DataSources<'p>,
        name: &str,
        config: &MethodConfig,
    ) -> Result<MemoryNeeds> {
        let plan = src
            .program
            .plan(name)
            .ok_or_else(|| Error::MethodNotFound(name.to_string()))?;
        let mut layout = ArenaLayout::from_plan(&plan, config)?;
        values::decode(&plan, &src, &mut layout, config)?;
        Ok(layout.needs())
    }

    fn load_impl(
        src: DataSources<'p>,
        name: &str,
        registry: &KernelRegistry,
        options: LoadOptions,
        lent: Option<&'p mut [u8]>,
    ) -> Result<Self> {
        if !cfg!(feature = "plan") && !options.partitioners.is_empty() {
            return Err(Error::PlanningDisabled);
        }
        let config = options.config;
        let plan = src
            .program
            .plan(name)
            .ok_or_else(|| Error::MethodNotFound(name.to_string()))?;
        let mut layout = ArenaLayout::from_plan(&plan, &config)?;
        let io_arena = layout.io_arena();
        let values::Values {
            mut values,
            pool,
            stateful,
        } = values::decode(&plan, &src, &mut layout, &config)?;
        let mut arenas = layout.allocate(lent)?;

        let ops = instructions::resolve_operators(&plan, registry)?;
        let mut delegates = delegates::init_delegates(&src, &plan, name, &options)?;
        let tables = instructions::Tables {
            values: &values,
            pool: &pool,
            ops: &ops,
            delegates: &delegates,
        };
        let mut code = instructions::decode_chains(&plan, &tables)?;
        let (inputs, outputs) = instructions::decode_io(&plan, values.len())?;
        let input_specs = inputs.iter().map(|&i| values[i as usize]).collect();

        let pass = Pass {
            values: &values,
            pool: &pool,
            ops: &ops,
            boundary: Boundary {
                inputs: &inputs,
                outputs: &outputs,
                stateful: &stateful,
            },
            num_threads: options.num_threads(),
            release: src.release,
        };
        // Without the `plan` feature the planning stages are not linked (this is constant).
        let planning = cfg!(feature = "plan") && options.prepare;
        let (regions, partitioned_calls) = if planning && !options.partitioners.is_empty() {
            partition_calls(&pass, &mut code, &options.partitioners, &mut delegates)?
        } else {
            (0, 0)
        };
        let planned = if planning {
            plan_calls(&pass, &mut code)?
        } else {
            Planned::default()
        };
        let scratch = planned.place(&mut values, &mut arenas, &config)?;
        let Planned {
            states,
            stats: mut plan_stats,
            ..
        } = planned;
        plan_stats.regions = regions;
        plan_stats.partitioned_calls = partitioned_calls;

        let Delegates { handles, names } = delegates;
        let mut method = Method {
            name: name.to_string(),
            values,
            pool,
            arenas,
            io_arena,
            args: code.args,
            chains: code.chains,
            ops,
            inputs,
            outputs,
            input_specs,
            config,
            instructions_run: 0,
            states,
            scratch,
            parallel: options.parallel,
            plan_stats,
            delegates: handles,
            delegate_names: names,
        };
        method.commit_caches();
        Ok(method)
    }

    /// Makes the pages of the KV caches resident now (the arenas are zeroed lazily by the
    /// OS): a generation's memory then stays flat instead of growing by one cache row per
    /// token, and a cache too big for the machine fails at load, not mid-generation.
    /// Contents are unchanged (each page's first byte is read and written back).
    fn commit_caches(&mut self) {
        const PAGE: usize = 4096;
        for v in self.cache_tensors() {
            if let Ok(bytes) = self.state_mut(v) {
                for chunk in bytes.chunks_mut(PAGE) {
                    chunk[0] = core::hint::black_box(chunk[0]);
                }
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }
    /// The declared value of input `i` (for tensors: dtype and upper-bound sizes).
    pub fn input_spec(&self, i: usize) -> Option<&Value<'p>> {
        self.input_specs.get(i)
    }
    /// Names of the operators this method calls, in operator-table order, followed by one
    /// name per delegate (`"<backend id> delegate <i>"`; [`KernelEvent::op_index`] counts on
    /// past the operators for delegate calls).
    pub fn operator_names(&self) -> impl Iterator<Item = &str> {
        self.ops
            .iter()
            .map(|o| o.name.as_str())
            .chain(self.delegate_names.iter().map(|s| s.as_str()))
    }
    /// Bytes of planned memory this method holds (all arenas).
    pub fn planned_bytes(&self) -> usize {
        self.arenas.iter().map(|a| a.len()).sum()
    }
    /// Number of instructions in each chain.
    pub fn chain_lengths(&self) -> impl Iterator<Item = usize> + '_ {
        self.chains.iter().map(|c| c.len())
    }
    /// The kernel call at `(chain, instruction)`: its operator name and a view of its
    /// arguments (current metadata). `None` for other instructions and removed calls.
    pub fn kernel_call(&self, chain: usize, instruction: usize) -> Option<(&str, ArgView<'_, 'p>)> {
        match self.chains.get(chain)?.get(instruction)? {
            Instr::Kernel { op, args, .. } => Some((
                self.ops.get(*op as usize)?.name.as_str(),
                ArgView {
                    values: &self.values,
                    pool: &self.pool,
                    args: self.args.get(args.range())?,
                },
            )),
            _ => None,
        }
    }
    /// What load-time planning did: prepared states, their bytes, removed calls.
    pub fn plan_stats(&self) -> PlanStats {
        self.plan_stats
    }
    /// Bytes the delegates (the program's and the partitioners' regions) hold: packed weights
    /// and their buffers.
    pub fn delegate_bytes(&self) -> usize {
        self.delegates.iter().map(|d| d.memory_bytes()).sum()
    }
    /// Bytes held by the kernels' prepared states (packed weights).
    pub fn prepared_bytes(&self) -> usize {
        self.plan_stats.prepared_bytes
    }
    /// Threads the method's kernels may use.
    pub fn num_threads(&self) -> usize {
        self.parallel.as_ref().map_or(1, |p| p.num_threads().max(1))
    }
    /// Instructions run by the last `execute`.
    pub fn instructions_run(&self) -> u64 {
        self.instructions_run
    }

    /// Sets tensor input `i` from `bytes` in row-major (or the declared dim order's) memory order.
    pub fn set_input_tensor(
        &mut self,
        i: usize,
        dtype: ScalarType,
        sizes: &[usize],
        bytes: &[u8],
    ) -> Result<()> {
        let vi = *self.inputs.get(i).ok_or(Error::InputIndex {
            index: i,
            count: self.inputs.len(),
        })? as usize;
        let Some(Value::Tensor(spec)) = self.input_specs.get(i).copied() else {
            return Err(Error::Input {
                index: i,
                message: "this input is not a tensor".into(),
            });
        };
        if dtype != spec.info.dtype() {
            return Err(Error::InputDType {
                index: i,
                expected: spec.info.dtype(),
                given: dtype,
            });
        }
        let shape_err = || Error::InputShape {
            index: i,
            expected: spec.info.sizes().to_vec(),
            given: sizes.to_vec(),
        };
        if sizes.len() != spec.info.rank() {
            return Err(shape_err());
        }
        let fits = match spec.dynamism {
            Dynamism::Static => sizes == spec.info.sizes(),
            Dynamism::Bounded => sizes.iter().zip(spec.info.sizes()).all(|(g, b)| g <= b),
        };
        if !fits {
            return Err(shape_err());
        }
        let Value::Tensor(t) = &mut self.values[vi] else {
            return Err(Error::Input {
                index: i,
                message: "input value is no longer a tensor".into(),
            });
        };
        let mut info = spec.info;
        info.set_sizes(sizes).map_err(|e| Error::Input {
            index: i,
            message: e.to_string(),
        })?;
        if bytes.len() != info.nbytes() {
            return Err(Error::InputBytes {
                index: i,
                expected: info.nbytes(),
                given: bytes.len(),
            });
        }
        let Storage::Planned { arena, offset } = t.storage else {
            return Err(Error::Input {
                index: i,
                message: "input tensor is a constant".into(),
            });
        };
        // The input slot may hold another tensor now (a MoveCall of an earlier run).
        if bytes.len() > t.capacity {
            return Err(Error::Input {
                index: i,
                message: format!(
                    "{} bytes do not fit the input's {} bytes",
                    bytes.len(),
                    t.capacity
                ),
            });
        }
        t.info = info;
        let dst = self.arenas[arena as usize]
            .bytes_mut()
            .get_mut(offset..offset + bytes.len())
            .ok_or_else(|| Error::Input {
                index: i,
                message: "input does not fit its planned buffer".into(),
            })?;
        dst.copy_from_slice(bytes);
        Ok(())
    }

    /// Sets a scalar input. As in ExecuTorch, the value must equal the one the program was
    /// exported with (the graph is specialised on it).
    pub fn set_input_value(&mut self, i: usize, v: Value<'p>) -> Result<()> {
        let spec = *self.input_specs.get(i).ok_or(Error::InputIndex {
            index: i,
            count: self.inputs.len(),
        })?;
        let ok = match (spec, v) {
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Double(a), Value::Double(b)) => (a - b).abs() <= 1e-4 + 1e-5 * b.abs(),
            (Value::None, Value::None) => true,
            _ => false,
        };
        if !ok {
            return Err(Error::Input {
                index: i,
                message: format!("expected {:?}, got {:?}", spec, v),
            });
        }
        Ok(())
    }

    /// The caches this method writes in place and keeps across runs: the arguments its
    /// kernels declare as caches ([`crate::Kernel::caches`]: the caches of
    /// `llama::update_cache` and `llama::sdpa_with_kv_cache`) that are planned tensors, as
    /// value indices, each once, in call order. A runner saves and restores them
    /// ([`Method::state`], [`Method::state_mut`]) to run several sequences through one method
    /// (beam search).
    pub fn cache_tensors(&self) -> Vec<usize> {
        self.planned_args(|k| k.caches)
    }

    /// Every planned tensor some kernel of this method writes in place ([`crate::Kernel::writes`]:
    /// the caches of [`Method::cache_tensors`], and the mutable buffers that `aten::copy_`
    /// writes back, such as a recurrent layer's state), as value indices, each once, in call
    /// order: what a method keeps from run to run. Zeroing them returns a method whose program
    /// gives its buffers no initial values to the state a fresh load has.
    pub fn persistent_tensors(&self) -> Vec<usize> {
        self.planned_args(|k| k.writes)
    }

    /// The planned tensors passed as the arguments `which` selects of each kernel call.
    fn planned_args(
        &self,
        which: impl Fn(&crate::Kernel) -> crate::registry::ArgSet,
    ) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for (kernel, args) in self.kernel_calls() {
            for v in which(kernel).iter().filter_map(|p| args.get(p)) {
                let v = *v as usize;
                let planned = matches!(
                    self.values.get(v),
                    Some(Value::Tensor(Tensor {
                        storage: Storage::Planned { .. },
                        ..
                    }))
                );
                if planned && !out.contains(&v) {
                    out.push(v);
                }
            }
        }
        out
    }

    /// Every kernel call still in the method: its kernel and argument values.
    fn kernel_calls(&self) -> impl Iterator<Item = (&Kernel, &[u32])> + '_ {
        self.chains.iter().flatten().filter_map(|ins| match ins {
            Instr::Kernel { op, args, .. } => Some((
                &self.ops.get(*op as usize)?.kernel,
                self.args.get(args.range())?,
            )),
            _ => None,
        })
    }

    /// Whether tensor input `i` keeps what [`Method::set_input_tensor`] wrote across runs, so
    /// that a runner may set an input that does not change (an encoder's output fed to every
    /// decoder step) once. True when the program left the input to the caller (exported with
    /// `alloc_graph_input=False`): it then has memory of its own, which no planned value
    /// shares; and when no instruction writes it (it is no call's `out` argument, no argument
    /// its kernel writes in place ([`crate::Kernel::writes`]: a cache, `copy_`'s destination),
    /// no move target, not freed, not passed to a delegate).
    pub fn input_is_preserved(&self, i: usize) -> bool {
        let Some(&vi) = self.inputs.get(i) else {
            return false;
        };
        match self.values.get(vi as usize) {
            Some(Value::Tensor(Tensor {
                storage: Storage::Planned { arena, .. },
                ..
            })) if *arena == self.io_arena => {}
            _ => return false,
        }
        for ins in self.chains.iter().flatten() {
            let written = match ins {
                Instr::Kernel { op, args, .. } => {
                    let a = self.args.get(args.range()).unwrap_or(&[]);
                    let in_place = self
                        .ops
                        .get(*op as usize)
                        .is_some_and(|o| o.kernel.writes.iter().any(|p| a.get(p) == Some(&vi)));
                    a.last() == Some(&vi) || in_place
                }
                Instr::Move { to, .. } => *to == vi,
                Instr::Free { value } => *value == vi,
                Instr::Delegate { args, .. } => match self.args.get(args.range()) {
                    Some(a) => a.contains(&vi),
                    None => true,
                },
                Instr::Nop | Instr::JumpFalse { .. } => false,
            };
            if written {
                return false;
            }
        }
        true
    }

    /// A planned tensor (such as one of [`Method::cache_tensors`]): metadata and bytes.
    pub fn state(&self, v: usize) -> Result<TensorRef<'_>> {
        match self.values.get(v) {
            Some(Value::Tensor(t)) if matches!(t.storage, Storage::Planned { .. }) => {
                self.tensor_ref(v, t).map_err(|source| Error::Kernel {
                    op: "state".into(),
                    instruction: 0,
                    source,
                })
            }
            _ => Err(Error::NotPlanned { value: v }),
        }
    }

    /// The bytes of a planned tensor, writable (to restore saved state).
    pub fn state_mut(&mut self, v: usize) -> Result<&mut [u8]> {
        let (arena, offset, n) = match self.values.get(v) {
            Some(Value::Tensor(Tensor {
                storage: Storage::Planned { arena, offset },
                info,
                ..
            })) => (*arena as usize, *offset, info.nbytes()),
            _ => return Err(Error::NotPlanned { value: v }),
        };
        let size = self.arenas.get(arena).map_or(0, |a| a.len());
        self.arenas
            .get_mut(arena)
            .and_then(|a| a.bytes_mut().get_mut(offset..offset.checked_add(n)?))
            .ok_or(Error::Overrun {
                offset: offset as u64,
                nbytes: n,
                buffer: arena as u32 + 1,
                size,
            })
    }

    /// Output `i` after `execute`: a tensor (metadata and bytes) or a scalar.
    pub fn output(&self, i: usize) -> Result<Output<'_>> {
        let vi = *self.outputs.get(i).ok_or(Error::OutputIndex {
            index: i,
            count: self.outputs.len(),
        })? as usize;
        Ok(match &self.values[vi] {
            Value::Tensor(t) => {
                Output::Tensor(self.tensor_ref(vi, t).map_err(|source| Error::Kernel {
                    op: "output".into(),
                    instruction: 0,
                    source,
                })?)
            }
            Value::Int(v) => Output::Int(*v),
            Value::Double(v) => Output::Double(*v),
            Value::Bool(v) => Output::Bool(*v),
            Value::None => Output::None,
            v => Output::Other(v.kind()),
        })
    }

    pub(crate) fn tensor_ref<'s>(
        &'s self,
        vi: usize,
        t: &'s Tensor<'p>,
    ) -> core::result::Result<TensorRef<'s>, KernelError> {
        let n = t.info.nbytes();
        let bytes = match t.storage {
            Storage::Planned { arena, offset } => self
                .arenas
                .get(arena as usize)
                .and_then(|a| a.bytes().get(offset..offset.checked_add(n)?))
                .ok_or(KernelError::SizeOverflow)?,
            Storage::Constant(b) => b.get(..n).ok_or(KernelError::SizeOverflow)?,
            // A freed (or never backed) tensor has no bytes to show for its sizes.
            Storage::Empty if n == 0 => &[],
            Storage::Empty => return Err(KernelError::NoData { value: vi }),
        };
        Ok(TensorRef {
            info: &t.info,
            bytes,
        })
    }
}

/// One output of a method.
pub enum Output<'a> {
    Tensor(TensorRef<'a>),
    Int(i64),
    Double(f64),
    Bool(bool),
    None,
    /// A value kind that is not returned to users (lists); names the kind.
    Other(&'static str),
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::partition::{CallGraph, Partitioner, Region};

    struct TakesNothing;

    impl Partitioner for TakesNothing {
        fn name(&self) -> &str {
            "nothing"
        }
        fn partition<'p>(&self, _: &CallGraph<'_, 'p>) -> Result<Vec<Region<'p>>, KernelError> {
            Ok(Vec::new())
        }
    }

    /// A partitioner is refused, not ignored, when the planning stages are compiled out.
    #[test]
    fn partitioners_need_the_plan_feature() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/models/mlp/model.pte"
        );
        let bytes = std::fs::read(path).unwrap();
        let program = Program::parse(&bytes).unwrap();
        let options = LoadOptions {
            partitioners: alloc::vec![Arc::new(TakesNothing) as Arc<dyn Partitioner>],
            ..LoadOptions::default()
        };
        let err = Method::load_with_options(
            DataSources::program(program),
            "forward",
            &KernelRegistry::new(),
            options,
        )
        .err()
        .unwrap();
        if cfg!(feature = "plan") {
            assert!(matches!(err, Error::OperatorMissing { .. }), "{err}");
        } else {
            assert!(matches!(err, Error::PlanningDisabled), "{err}");
        }
    }
}
