//! Loading a method (values, memory plan, resolved kernels) and running its instructions.
//!
//! Everything read from the file is checked here, once, at load: value indices, list items,
//! tensor sizes and dim orders, planned offsets against arena sizes, constant ranges, operator
//! names against the registry (and each call against its kernel's check), jump destinations.
//! Execution then only reads the prepared tables and allocates nothing.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use pteron_format::{schema, DataFile, Program};

use crate::backend::{
    BackendInit, BackendRegistry, CompileSpec, DelegateHandle, NamedDataMap, ProgramNamedData,
};
use crate::dtype::ScalarType;
use crate::error::{Error, KernelError, Result};
use crate::kernel::{ArgView, Kernel, KernelContext, KernelRegistry, TensorRef};
use crate::memory::{Arena, ARENA_ALIGN};
use crate::partition::{check_region, CallGraph, Partitioner};
use crate::prepare::{self, Call, Graph, Parallel, PrepareContext, Prepared, Uses, INLINE};
use crate::tensor::{TensorInfo, MAX_RANK};
use crate::value::{Dynamism, ListPool, ListRef, Storage, Tensor, Value, NONE_INDEX};

/// Limits and options for loading and running a method.
#[derive(Clone, Copy, Debug)]
pub struct MethodConfig {
    /// Most instructions one `execute` may run (guards against loops in hostile programs).
    pub instruction_budget: u64,
    /// Most bytes of planned memory (all arenas together) a method may ask for.
    pub max_planned_bytes: u64,
    /// Most values a method may declare.
    pub max_values: usize,
}

impl Default for MethodConfig {
    fn default() -> Self {
        MethodConfig {
            instruction_budget: 10_000_000,
            max_planned_bytes: 16 << 30,
            max_values: 10_000_000,
        }
    }
}

/// How a method is loaded: limits, threads, and whether kernels prepare call sites.
#[derive(Clone)]
pub struct LoadOptions {
    pub config: MethodConfig,
    /// Threads kernels may split work across; `None` runs everything on the calling thread.
    pub parallel: Option<Arc<dyn Parallel + Send + Sync>>,
    /// Run kernels' `prepare` steps (packed weights, fusion). Off: every call runs without
    /// prepared state, as the kernels' plain run paths.
    pub prepare: bool,
    /// Backends for the program's delegates (`DelegateCall`); empty: delegated programs fail
    /// to load with [`Error::BackendMissing`].
    pub backends: Arc<BackendRegistry>,
    /// Partitioners that may take runs of calls and run them as one unit (only when `prepare`
    /// is on), tried in order.
    pub partitioners: Vec<Arc<dyn Partitioner>>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            config: MethodConfig::default(),
            parallel: None,
            prepare: true,
            backends: Arc::new(BackendRegistry::new()),
            partitioners: Vec::new(),
        }
    }
}

impl From<MethodConfig> for LoadOptions {
    fn from(config: MethodConfig) -> Self {
        LoadOptions {
            config,
            ..Default::default()
        }
    }
}

/// What load-time planning did to a method (see [`crate::prepare`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Calls that have prepared state.
    pub prepared_calls: usize,
    /// Bytes held by prepared states (packed weights and the like).
    pub prepared_bytes: usize,
    /// Bytes of the scratch buffer shared by all calls.
    pub scratch_bytes: usize,
    /// Calls removed because their consumers absorbed them (constant producers).
    pub absorbed_calls: usize,
    /// Calls removed because their producer fused them.
    pub fused_calls: usize,
    /// Bytes of memory given to fused outputs whose planned memory overlapped their new
    /// producer's inputs.
    pub rehomed_bytes: usize,
    /// Regions a partitioner took (see [`crate::partition`]), and the calls they replaced.
    pub regions: usize,
    pub partitioned_calls: usize,
}

/// No prepared state for this instruction.
const NO_STATE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
enum Instr {
    Kernel {
        op: u32,
        args: ListRef,
        state: u32,
    },
    /// A call removed by load-time planning.
    Nop,
    Move {
        from: u32,
        to: u32,
    },
    JumpFalse {
        cond: u32,
        dest: u32,
    },
    Free {
        value: u32,
    },
    /// A `DelegateCall`: delegate `index` over the argument values `args`.
    Delegate {
        index: u32,
        args: ListRef,
    },
}

#[derive(Clone)]
struct Op {
    name: String,
    kernel: Kernel,
}

/// A loaded method, ready to run. Borrows constants from the program's bytes.
pub struct Method<'p> {
    name: String,
    values: Vec<Value<'p>>,
    pool: ListPool,
    arenas: Vec<Arena>,
    /// The arena of tensors the plan leaves unplanned (user inputs and outputs); arenas after
    /// it hold values that load-time planning gave memory of their own.
    io_arena: u32,
    /// Instruction arguments (value indices).
    args: Vec<u32>,
    chains: Vec<Vec<Instr>>,
    ops: Vec<Op>,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
    /// Each input's declared (upper-bound) metadata.
    input_specs: Vec<Value<'p>>,
    config: MethodConfig,
    instructions_run: u64,
    states: Vec<Prepared>,
    scratch: Arena,
    parallel: Option<Arc<dyn Parallel + Send + Sync>>,
    plan_stats: PlanStats,
    /// Initialised delegates, in the plan's delegate order.
    delegates: Vec<Box<dyn DelegateHandle + 'p>>,
    /// Each delegate's name for errors and observers (`"<backend id> delegate <i>"`).
    delegate_names: Vec<String>,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidProgram(msg.into())
}

fn index(what: &str, i: i64, len: usize) -> Result<u32> {
    if i < 0 || i as u64 >= len as u64 {
        return Err(invalid(format!("{what} index {i} out of range (0..{len})")));
    }
    Ok(i as u32)
}

/// Full kernel name of an operator: `name` or `name.overload`.
pub fn operator_name(op: &schema::Operator<'_>) -> String {
    let name = op.name().unwrap_or("");
    match op.overload() {
        Some(o) if !o.is_empty() => format!("{name}.{o}"),
        _ => name.to_string(),
    }
}

/// Builds a tensor's metadata from its flatbuffer table (sizes ≥ 0, rank ≤ 16, dim order a
/// permutation, byte size without overflow).
pub fn parse_tensor_info(t: &schema::Tensor<'_>) -> Result<(TensorInfo, Dynamism)> {
    let st = t.scalar_type().0;
    let dtype =
        ScalarType::from_i8(st).ok_or_else(|| invalid(format!("unknown scalar type {st}")))?;
    let sizes = t.sizes().ok_or_else(|| invalid("tensor without sizes"))?;
    let dim_order = t
        .dim_order()
        .ok_or_else(|| invalid("tensor without dim_order"))?;
    if sizes.len() > MAX_RANK {
        return Err(invalid(format!(
            "tensor rank {} exceeds {MAX_RANK}",
            sizes.len()
        )));
    }
    let mut s = [0usize; MAX_RANK];
    for (i, v) in sizes.iter().enumerate() {
        if v < 0 {
            return Err(invalid(format!("negative tensor size {v}")));
        }
        s[i] = v as usize;
    }
    if t.storage_offset() != 0 {
        return Err(invalid(format!(
            "tensor storage_offset {} is not supported",
            t.storage_offset()
        )));
    }
    let info = TensorInfo::with_dim_order(dtype, &s[..sizes.len()], dim_order.bytes())
        .map_err(|e| invalid(format!("tensor: {e}")))?;
    let dynamism = match t.shape_dynamism() {
        schema::TensorShapeDynamism::STATIC => Dynamism::Static,
        schema::TensorShapeDynamism::DYNAMIC_BOUND
        | schema::TensorShapeDynamism::DYNAMIC_UNBOUND => Dynamism::Bounded,
        other => return Err(invalid(format!("unknown shape dynamism {}", other.0))),
    };
    Ok((info, dynamism))
}

/// Sources of data for a method: the program and, optionally, an external `.ptd` file.
#[derive(Clone, Copy)]
pub struct DataSources<'p> {
    pub program: Program<'p>,
    pub external: Option<DataFile<'p>>,
    /// Told about constants that load-time planning packed into a layout of its own, so that
    /// the memory holding them may be given back (e.g. the pages of a memory-mapped file).
    pub release: Option<&'p dyn PageRelease>,
}

/// Gives back memory holding bytes the method no longer needs to keep resident. The bytes
/// must stay readable (a later read may fault them back in): this is a hint, not a free.
pub trait PageRelease: Sync {
    fn release(&self, bytes: &[u8]);
}

impl<'p> Method<'p> {
    /// Loads the plan named `name` of `program`, resolving its operators in `registry`.
    pub fn load(
        program: &Program<'p>,
        name: &str,
        registry: &KernelRegistry,
        config: MethodConfig,
    ) -> Result<Self> {
        Self::load_with_data(
            DataSources {
                program: *program,
                external: None,
                release: None,
            },
            name,
            registry,
            config,
        )
    }

    pub fn load_with_data(
        src: DataSources<'p>,
        name: &str,
        registry: &KernelRegistry,
        config: MethodConfig,
    ) -> Result<Self> {
        Self::load_with_options(src, name, registry, config.into())
    }

    /// Loads a method with explicit options (threads, preparation).
    pub fn load_with_options(
        src: DataSources<'p>,
        name: &str,
        registry: &KernelRegistry,
        options: LoadOptions,
    ) -> Result<Self> {
        let config = options.config;
        let program = &src.program;
        let plan = program
            .plan(name)
            .ok_or_else(|| Error::MethodNotFound(name.to_string()))?;
        let fb_values = plan.values().ok_or_else(|| invalid("plan has no values"))?;
        let n = fb_values.len();
        if n > config.max_values {
            return Err(Error::ResourceLimit {
                what: "values",
                requested: n as u64,
                limit: config.max_values as u64,
            });
        }

        // Planned arenas: non_const_buffer_sizes[0] is reserved; buffer i serves memory_id i.
        let sizes = plan
            .non_const_buffer_sizes()
            .ok_or_else(|| invalid("plan has no non_const_buffer_sizes"))?;
        let mut arena_sizes: Vec<usize> = Vec::new();
        let mut total: u64 = 0;
        for (i, s) in sizes.iter().enumerate().skip(1) {
            if s < 0 {
                return Err(invalid(format!("planned buffer {i} has negative size {s}")));
            }
            total = total.saturating_add(s as u64);
            if total > config.max_planned_bytes {
                return Err(Error::ResourceLimit {
                    what: "bytes of planned memory",
                    requested: total,
                    limit: config.max_planned_bytes,
                });
            }
            arena_sizes.push(s as usize);
        }
        // One more arena holds tensors the plan leaves unplanned (user inputs, outputs).
        let io_arena = arena_sizes.len() as u32;
        let mut io_size: usize = 0;
        let mut initial: Vec<(u32, usize, &'p [u8])> = Vec::new();
        // Values with initial contents that persist across runs (mutable buffers).
        let mut stateful: Vec<usize> = Vec::new();

        let mut values: Vec<Value<'p>> = Vec::new();
        values
            .try_reserve_exact(n)
            .map_err(|_| invalid("too many values"))?;
        let mut pool = ListPool::default();
        for (vi, ev) in fb_values.iter().enumerate() {
            let v = match ev.val_type() {
                schema::KernelTypes::Null => Value::None,
                schema::KernelTypes::Int => {
                    Value::Int(ev.val_as_int().ok_or_else(|| invalid("bad Int"))?.int_val())
                }
                schema::KernelTypes::Bool => Value::Bool(
                    ev.val_as_bool()
                        .ok_or_else(|| invalid("bad Bool"))?
                        .bool_val(),
                ),
                schema::KernelTypes::Double => Value::Double(
                    ev.val_as_double()
                        .ok_or_else(|| invalid("bad Double"))?
                        .double_val(),
                ),
                schema::KernelTypes::String => Value::String(
                    ev.val_as_string()
                        .and_then(|s| s.string_val())
                        .unwrap_or(""),
                ),
                schema::KernelTypes::IntList => {
                    let items = ev
                        .val_as_int_list()
                        .and_then(|l| l.items())
                        .ok_or_else(|| invalid("IntList without items"))?;
                    let start = pool.indices.len() as u32;
                    for it in items.iter() {
                        pool.indices.push(index("IntList item", it, n)?);
                    }
                    Value::IntList(ListRef {
                        start,
                        len: items.len() as u32,
                    })
                }
                schema::KernelTypes::DoubleList => {
                    let items = ev
                        .val_as_double_list()
                        .and_then(|l| l.items())
                        .ok_or_else(|| invalid("DoubleList without items"))?;
                    let start = pool.doubles.len() as u32;
                    pool.doubles.extend(items.iter());
                    Value::DoubleList(ListRef {
                        start,
                        len: items.len() as u32,
                    })
                }
                schema::KernelTypes::BoolList => {
                    let items = ev
                        .val_as_bool_list()
                        .and_then(|l| l.items())
                        .ok_or_else(|| invalid("BoolList without items"))?;
                    let start = pool.bools.len() as u32;
                    pool.bools.extend(items.iter());
                    Value::BoolList(ListRef {
                        start,
                        len: items.len() as u32,
                    })
                }
                schema::KernelTypes::TensorList => {
                    let items = ev
                        .val_as_tensor_list()
                        .and_then(|l| l.items())
                        .ok_or_else(|| invalid("TensorList without items"))?;
                    let start = pool.indices.len() as u32;
                    for it in items.iter() {
                        // Items must name tensors defined earlier (no forward references).
                        let i = index("TensorList item", it as i64, vi)?;
                        if !matches!(values[i as usize], Value::Tensor(_)) {
                            return Err(invalid(format!("TensorList item {i} is not a tensor")));
                        }
                        pool.indices.push(i);
                    }
                    Value::TensorList(ListRef {
                        start,
                        len: items.len() as u32,
                    })
                }
                schema::KernelTypes::OptionalTensorList => {
                    let items = ev
                        .val_as_optional_tensor_list()
                        .and_then(|l| l.items())
                        .ok_or_else(|| invalid("OptionalTensorList without items"))?;
                    let start = pool.indices.len() as u32;
                    for it in items.iter() {
                        if it == -1 {
                            pool.indices.push(NONE_INDEX);
                            continue;
                        }
                        let i = index("OptionalTensorList item", it as i64, vi)?;
                        match values[i as usize] {
                            Value::Tensor(_) => pool.indices.push(i),
                            Value::None => pool.indices.push(NONE_INDEX),
                            _ => {
                                return Err(invalid(format!(
                                    "OptionalTensorList item {i} is not a tensor"
                                )))
                            }
                        }
                    }
                    Value::OptionalTensorList(ListRef {
                        start,
                        len: items.len() as u32,
                    })
                }
                schema::KernelTypes::Tensor => {
                    let t = ev.val_as_tensor().ok_or_else(|| invalid("bad Tensor"))?;
                    let (info, dynamism) = parse_tensor_info(&t).map_err(|e| match e {
                        Error::InvalidProgram(m) => invalid(format!("value {vi}: {m}")),
                        e => e,
                    })?;
                    let nbytes = info.nbytes();
                    let extra = t.extra_tensor_info();
                    let external =
                        extra.is_some_and(|e| e.location() == schema::TensorDataLocation::EXTERNAL);
                    let storage = if external {
                        let key = extra
                            .and_then(|e| e.fully_qualified_name())
                            .ok_or_else(|| invalid("external tensor without a name"))?;
                        let file = src.external.ok_or_else(|| {
                            invalid(format!(
                                "tensor {key:?} lives in an external .ptd file, and none was given"
                            ))
                        })?;
                        let bytes = file.get(key)?;
                        if let Some(l) = file.layout(key)? {
                            let same = l.scalar_type == info.dtype() as i8
                                && l.sizes.len() == info.rank()
                                && l.sizes
                                    .iter()
                                    .zip(info.sizes())
                                    .all(|(&a, &b)| a >= 0 && a as usize == b)
                                && l.dim_order == info.dim_order();
                            if !same {
                                return Err(invalid(format!("external tensor {key:?}: layout in the .ptd does not match the program")));
                            }
                        }
                        let bytes = bytes.get(..nbytes).ok_or_else(|| {
                            invalid(format!(
                                "external tensor {key:?} has {} bytes, needs {nbytes}",
                                bytes.len()
                            ))
                        })?;
                        match t.allocation_info() {
                            None => Storage::Constant(bytes),
                            Some(a) => {
                                let (arena, offset) = planned(&a, nbytes, &arena_sizes)?;
                                initial.push((arena, offset, bytes));
                                stateful.push(vi);
                                Storage::Planned { arena, offset }
                            }
                        }
                    } else {
                        match (t.data_buffer_idx(), t.allocation_info()) {
                            (0, None) => {
                                // Supplied at run time: give it a home in the I/O arena.
                                let offset = io_size;
                                let padded = nbytes
                                    .checked_add(ARENA_ALIGN - 1)
                                    .ok_or_else(|| invalid("tensor too large"))?
                                    / ARENA_ALIGN
                                    * ARENA_ALIGN;
                                io_size = io_size
                                    .checked_add(padded)
                                    .ok_or_else(|| invalid("tensor too large"))?;
                                if total.saturating_add(io_size as u64) > config.max_planned_bytes {
                                    return Err(Error::ResourceLimit {
                                        what: "bytes of planned memory",
                                        requested: total.saturating_add(io_size as u64),
                                        limit: config.max_planned_bytes,
                                    });
                                }
                                Storage::Planned {
                                    arena: io_arena,
                                    offset,
                                }
                            }
                            (idx, None) => Storage::Constant(program.constant(idx, nbytes)?),
                            (idx, Some(a)) => {
                                let (arena, offset) = planned(&a, nbytes, &arena_sizes)?;
                                if idx > 0 {
                                    stateful.push(vi);
                                    initial.push((
                                        arena,
                                        offset,
                                        program.mutable_data(idx, nbytes)?,
                                    ));
                                }
                                Storage::Planned { arena, offset }
                            }
                        }
                    };
                    Value::Tensor(Tensor {
                        info,
                        storage,
                        capacity: nbytes,
                        dynamism,
                    })
                }
                other => return Err(invalid(format!("value {vi} has unknown type {}", other.0))),
            };
            values.push(v);
        }
        if pool.indices.len() > u32::MAX as usize / 2 {
            return Err(invalid("too many list items"));
        }

        // Allocate memory and copy initial state (mutable buffers).
        let mut arenas = Vec::new();
        for &s in arena_sizes.iter().chain(core::iter::once(&io_size)) {
            arenas.push(Arena::new(s).ok_or(Error::ResourceLimit {
                what: "bytes of planned memory (allocation failed)",
                requested: s as u64,
                limit: config.max_planned_bytes,
            })?);
        }
        for (arena, offset, bytes) in initial {
            // Ranges were checked against the arena size in `planned`.
            arenas[arena as usize].bytes_mut()[offset..offset + bytes.len()].copy_from_slice(bytes);
        }

        // Operators → kernels; report every missing one at once.
        let mut ops = Vec::new();
        let mut missing = Vec::new();
        for op in plan.operators().into_iter().flatten() {
            let name = operator_name(&op);
            match registry.get(&name) {
                Some(&kernel) => ops.push(Op { name, kernel }),
                None => missing.push(name),
            }
        }
        if !missing.is_empty() {
            return Err(Error::OperatorMissing {
                op: missing.join(", "),
                reason: "no kernel registered".into(),
            });
        }
        let (delegates, delegate_names) = init_delegates(&src, &plan, name, &options)?;

        // Chains → instructions.
        let mut args: Vec<u32> = Vec::new();
        let mut chains: Vec<Vec<Instr>> = Vec::new();
        for chain in plan.chains().into_iter().flatten() {
            let instrs = chain
                .instructions()
                .ok_or_else(|| invalid("chain without instructions"))?;
            let len = instrs.len();
            let mut out = Vec::with_capacity(len);
            for (pc, ins) in instrs.iter().enumerate() {
                let it = match ins.instr_args_type() {
                    schema::InstructionArguments::KernelCall => {
                        let kc = ins
                            .instr_args_as_kernel_call()
                            .ok_or_else(|| invalid("bad KernelCall"))?;
                        let op = index("operator", kc.op_index() as i64, ops.len())?;
                        let a = kc
                            .args()
                            .ok_or_else(|| invalid("KernelCall without args"))?;
                        let start = args.len() as u32;
                        for x in a.iter() {
                            args.push(index("kernel argument", x as i64, n)?);
                        }
                        let r = ListRef {
                            start,
                            len: a.len() as u32,
                        };
                        if let Some(check) = ops[op as usize].kernel.check {
                            let view = ArgView {
                                values: &values,
                                pool: &pool,
                                args: &args[r.range()],
                            };
                            check(&view).map_err(|e| Error::OperatorMissing {
                                op: ops[op as usize].name.clone(),
                                reason: format!("instruction {pc}: {e}"),
                            })?;
                        }
                        Instr::Kernel {
                            op,
                            args: r,
                            state: NO_STATE,
                        }
                    }
                    schema::InstructionArguments::DelegateCall => {
                        let d = ins
                            .instr_args_as_delegate_call()
                            .ok_or_else(|| invalid("bad DelegateCall"))?;
                        let di = index(
                            "DelegateCall delegate",
                            d.delegate_index() as i64,
                            delegates.len(),
                        )?;
                        let a = d
                            .args()
                            .ok_or_else(|| invalid("DelegateCall without args"))?;
                        let start = args.len() as u32;
                        for x in a.iter() {
                            args.push(index("DelegateCall argument", x as i64, n)?);
                        }
                        let r = ListRef {
                            start,
                            len: a.len() as u32,
                        };
                        let view = ArgView {
                            values: &values,
                            pool: &pool,
                            args: &args[r.range()],
                        };
                        delegates[di as usize]
                            .check(&view)
                            .map_err(|source| Error::Delegate {
                                delegate: delegate_names[di as usize].clone(),
                                source,
                            })?;
                        Instr::Delegate { index: di, args: r }
                    }
                    schema::InstructionArguments::MoveCall => {
                        let m = ins
                            .instr_args_as_move_call()
                            .ok_or_else(|| invalid("bad MoveCall"))?;
                        Instr::Move {
                            from: index("move source", m.move_from() as i64, n)?,
                            to: index("move target", m.move_to() as i64, n)?,
                        }
                    }
                    schema::InstructionArguments::JumpFalseCall => {
                        let j = ins
                            .instr_args_as_jump_false_call()
                            .ok_or_else(|| invalid("bad JumpFalseCall"))?;
                        let cond = index("jump condition", j.cond_value_index() as i64, n)?;
                        let dest = j.destination_instruction();
                        if dest < 0 || dest as usize > len {
                            return Err(invalid(format!(
                                "jump destination {dest} outside the chain of {len} instructions"
                            )));
                        }
                        Instr::JumpFalse {
                            cond,
                            dest: dest as u32,
                        }
                    }
                    schema::InstructionArguments::FreeCall => {
                        let f = ins
                            .instr_args_as_free_call()
                            .ok_or_else(|| invalid("bad FreeCall"))?;
                        let v = index("free", f.value_index() as i64, n)?;
                        if !matches!(values[v as usize], Value::Tensor(_)) {
                            return Err(invalid(format!(
                                "FreeCall on value {v}, which is not a tensor"
                            )));
                        }
                        Instr::Free { value: v }
                    }
                    other => return Err(invalid(format!("unknown instruction type {}", other.0))),
                };
                out.push(it);
            }
            chains.push(out);
        }
        if args.len() > u32::MAX as usize / 2 {
            return Err(invalid("too many instruction arguments"));
        }

        let inputs = plan
            .inputs()
            .ok_or_else(|| invalid("plan has no inputs"))?
            .iter()
            .map(|i| index("plan input", i as i64, n))
            .collect::<Result<Vec<_>>>()?;
        let outputs = plan
            .outputs()
            .ok_or_else(|| invalid("plan has no outputs"))?
            .iter()
            .map(|i| index("plan output", i as i64, n))
            .collect::<Result<Vec<_>>>()?;
        let input_specs = inputs.iter().map(|&i| values[i as usize]).collect();

        let num_threads = options
            .parallel
            .as_ref()
            .map_or(1, |p| p.num_threads().max(1));
        let (mut delegates, mut delegate_names) = (delegates, delegate_names);
        let (regions, partitioned_calls) = if options.prepare && !options.partitioners.is_empty() {
            partition_calls(
                &values,
                &pool,
                &mut args,
                &mut chains,
                &ops,
                (&inputs, &outputs, &stateful),
                num_threads,
                src.release,
                &options.partitioners,
                (&mut delegates, &mut delegate_names),
            )?
        } else {
            (0, 0)
        };
        let planned_calls = if options.prepare {
            plan_calls(
                &values,
                &pool,
                &mut args,
                &mut chains,
                &ops,
                &inputs,
                &outputs,
                &stateful,
                num_threads,
                src.release,
            )?
        } else {
            Planned::default()
        };
        let Planned {
            states,
            stats: mut plan_stats,
            homes,
            arena_bytes,
        } = planned_calls;
        plan_stats.regions = regions;
        plan_stats.partitioned_calls = partitioned_calls;
        if !homes.is_empty() {
            let id = arenas.len() as u32;
            arenas.push(Arena::new(arena_bytes).ok_or(Error::ResourceLimit {
                what: "bytes of planned memory (allocation failed)",
                requested: arena_bytes as u64,
                limit: config.max_planned_bytes,
            })?);
            for (v, offset) in homes {
                if let Value::Tensor(t) = &mut values[v] {
                    t.storage = Storage::Planned { arena: id, offset };
                }
            }
        }
        if plan_stats.scratch_bytes as u64 > config.max_planned_bytes {
            return Err(Error::ResourceLimit {
                what: "bytes of scratch memory",
                requested: plan_stats.scratch_bytes as u64,
                limit: config.max_planned_bytes,
            });
        }
        let scratch = Arena::new(plan_stats.scratch_bytes).ok_or(Error::ResourceLimit {
            what: "bytes of scratch memory (allocation failed)",
            requested: plan_stats.scratch_bytes as u64,
            limit: config.max_planned_bytes,
        })?;

        let mut method = Method {
            name: name.to_string(),
            values,
            pool,
            arenas,
            io_arena,
            args,
            chains,
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
            delegates,
            delegate_names,
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
        let vi = *self.inputs.get(i).ok_or_else(|| Error::Input {
            index: i,
            message: format!("the method has {} inputs", self.inputs.len()),
        })? as usize;
        let Some(Value::Tensor(spec)) = self.input_specs.get(i).copied() else {
            return Err(Error::Input {
                index: i,
                message: "this input is not a tensor".into(),
            });
        };
        if dtype != spec.info.dtype() {
            return Err(Error::Input {
                index: i,
                message: format!("expected dtype {}, got {dtype}", spec.info.dtype()),
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
            return Err(Error::Input {
                index: i,
                message: format!(
                    "expected {} bytes of data, got {}",
                    info.nbytes(),
                    bytes.len()
                ),
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
        let spec = *self.input_specs.get(i).ok_or_else(|| Error::Input {
            index: i,
            message: format!("the method has {} inputs", self.inputs.len()),
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

    /// Runs every chain once.
    pub fn execute(&mut self) -> Result<()> {
        self.execute_observed(&mut NoObserver)
    }

    /// Runs every chain once, telling `observer` about each kernel call (for profiling).
    pub fn execute_observed(&mut self, observer: &mut dyn ExecutionObserver) -> Result<()> {
        let budget = self.config.instruction_budget;
        let mut count: u64 = 0;
        for c in 0..self.chains.len() {
            let mut pc = 0usize;
            while pc < self.chains[c].len() {
                count += 1;
                if count > budget {
                    self.instructions_run = count;
                    return Err(Error::InstructionBudget(budget));
                }
                match self.chains[c][pc] {
                    Instr::Nop => pc += 1,
                    Instr::Kernel { op, args, state } => {
                        let run = self.ops[op as usize].kernel.run;
                        let event = KernelEvent {
                            chain: c,
                            instruction: pc,
                            op_index: op as usize,
                            op: &self.ops[op as usize].name,
                        };
                        observer.kernel_begin(&event);
                        let parallel: &dyn Parallel = match &self.parallel {
                            Some(p) => &**p,
                            None => &INLINE,
                        };
                        let mut ctx = KernelContext {
                            values: &mut self.values,
                            pool: &self.pool,
                            arenas: &mut self.arenas,
                            args: &self.args[args.range()],
                            prepared: self.states.get(state as usize).map(|s| &*s.state),
                            scratch: self.scratch.bytes_mut(),
                            parallel,
                        };
                        let result = run(&mut ctx);
                        observer.kernel_end(&event);
                        result.map_err(|source| Error::Kernel {
                            op: self.ops[op as usize].name.clone(),
                            instruction: pc,
                            source,
                        })?;
                        pc += 1;
                    }
                    Instr::Move { from, to } => {
                        self.values[to as usize] = self.values[from as usize];
                        pc += 1;
                    }
                    Instr::JumpFalse { cond, dest } => {
                        if self.condition(cond as usize, pc)? {
                            pc += 1;
                        } else {
                            pc = dest as usize;
                        }
                    }
                    Instr::Free { value } => {
                        match &mut self.values[value as usize] {
                            Value::Tensor(t) => t.storage = Storage::Empty,
                            v => return Err(invalid(format!("FreeCall on a {} value", v.kind()))),
                        }
                        pc += 1;
                    }
                    Instr::Delegate { index, args } => {
                        let event = KernelEvent {
                            chain: c,
                            instruction: pc,
                            op_index: self.ops.len() + index as usize,
                            op: &self.delegate_names[index as usize],
                        };
                        observer.kernel_begin(&event);
                        let parallel: &dyn Parallel = match &self.parallel {
                            Some(p) => &**p,
                            None => &INLINE,
                        };
                        let mut ctx = KernelContext {
                            values: &mut self.values,
                            pool: &self.pool,
                            arenas: &mut self.arenas,
                            args: &self.args[args.range()],
                            prepared: None,
                            scratch: &mut [],
                            parallel,
                        };
                        let result = self.delegates[index as usize].execute(&mut ctx);
                        observer.kernel_end(&event);
                        result.map_err(|source| Error::Kernel {
                            op: self.delegate_names[index as usize].clone(),
                            instruction: pc,
                            source,
                        })?;
                        pc += 1;
                    }
                }
            }
        }
        self.instructions_run = count;
        Ok(())
    }

    /// Jump condition: a Bool, or a bool tensor (true only if every element is true).
    fn condition(&self, vi: usize, pc: usize) -> Result<bool> {
        match &self.values[vi] {
            Value::Bool(b) => Ok(*b),
            Value::Tensor(t) if t.info.dtype() == ScalarType::Bool => {
                let r = self.tensor_ref(vi, t).map_err(|source| Error::Kernel {
                    op: "jump_false".into(),
                    instruction: pc,
                    source,
                })?;
                Ok(r.bytes.iter().all(|&b| b != 0))
            }
            v => Err(invalid(format!("jump condition is a {}", v.kind()))),
        }
    }

    fn tensor_ref<'s>(
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

    /// The caches this method writes in place and keeps across runs: the cache arguments of
    /// its `llama::update_cache` and `llama::sdpa_with_kv_cache` calls, as value indices, each
    /// once, in call order. A runner saves and restores them ([`Method::state`],
    /// [`Method::state_mut`]) to run several sequences through one method (beam search).
    pub fn cache_tensors(&self) -> Vec<usize> {
        const WRITERS: [(&str, &[usize]); 2] = [
            ("llama::update_cache.out", &[1]),
            ("llama::sdpa_with_kv_cache.out", &[3, 4]),
        ];
        let mut out: Vec<usize> = Vec::new();
        for chain in &self.chains {
            for ins in chain {
                let Instr::Kernel { op, args, .. } = ins else {
                    continue;
                };
                let Some(name) = self.ops.get(*op as usize).map(|o| o.name.as_str()) else {
                    continue;
                };
                let Some((_, pos)) = WRITERS.iter().find(|(n, _)| *n == name) else {
                    continue;
                };
                let Some(args) = self.args.get(args.range()) else {
                    continue;
                };
                for &p in pos.iter() {
                    if let Some(&v) = args.get(p) {
                        let v = v as usize;
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
            }
        }
        out
    }

    /// Whether tensor input `i` keeps what [`Method::set_input_tensor`] wrote across runs, so
    /// that a runner may set an input that does not change (an encoder's output fed to every
    /// decoder step) once. True when the program left the input to the caller (exported with
    /// `alloc_graph_input=False`): it then has memory of its own, which no planned value
    /// shares; and when no instruction writes it (it is no call's `out` argument, no cache or
    /// `copy_` destination, no move target, not freed, not passed to a delegate).
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
        if self.cache_tensors().contains(&(vi as usize)) {
            return false;
        }
        for ins in self.chains.iter().flatten() {
            let written = match ins {
                Instr::Kernel { op, args, .. } => {
                    let a = self.args.get(args.range()).unwrap_or(&[]);
                    let copy_dest = self.ops.get(*op as usize).is_some_and(|o| {
                        o.name.starts_with("aten::copy_") && a.first() == Some(&vi)
                    });
                    a.last() == Some(&vi) || copy_dest
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
            _ => Err(invalid(format!("value {v} is not a planned tensor"))),
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
            _ => return Err(invalid(format!("value {v} is not a planned tensor"))),
        };
        self.arenas
            .get_mut(arena)
            .and_then(|a| a.bytes_mut().get_mut(offset..offset.checked_add(n)?))
            .ok_or_else(|| invalid(format!("value {v} lies outside its arena")))
    }

    /// Output `i` after `execute`: a tensor (metadata and bytes) or a scalar.
    pub fn output(&self, i: usize) -> Result<Output<'_>> {
        let vi = *self
            .outputs
            .get(i)
            .ok_or_else(|| invalid(format!("no output {i}")))? as usize;
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
}

/// Load-time planning: runs every kernel's `prepare` over its call site, removes constant
/// producers that their readers absorbed and consumers that their producer fused, and rewrites
/// the fused calls to write their last consumer's output. Returns the states (indexed by the
/// `state` of each kernel instruction) and what was done.
#[allow(clippy::too_many_arguments)]
/// The method's kernel calls in chain order and how each value is referenced (for load-time
/// planning and partitioning).
pub(crate) struct Analysis {
    pub calls: Vec<Call>,
    pub uses: Vec<Uses>,
    /// Chains that contain a JumpFalse.
    pub chain_jumps: Vec<bool>,
}

fn analyze_calls(
    values: &[Value<'_>],
    pool: &ListPool,
    args: &[u32],
    chains: &[Vec<Instr>],
    inputs: &[u32],
    outputs: &[u32],
    stateful: &[usize],
) -> Analysis {
    let n = values.len();
    // Every kernel call, in chain order, and where it sits.
    let mut calls: Vec<Call> = Vec::new();
    let mut chain_jumps = vec![false; chains.len()];
    for (c, chain) in chains.iter().enumerate() {
        for (pc, ins) in chain.iter().enumerate() {
            match *ins {
                Instr::Kernel { op, args: a, .. } => calls.push(Call {
                    chain: c as u32,
                    pc: pc as u32,
                    op,
                    args: a,
                }),
                Instr::JumpFalse { .. } => chain_jumps[c] = true,
                _ => {}
            }
        }
    }
    // How each value is referenced.
    let mut uses = vec![Uses::default(); n];
    let mut seen = vec![u32::MAX; n];
    for (k, call) in calls.iter().enumerate() {
        let a = &args[call.args.range()];
        for &v in a {
            if seen[v as usize] != k as u32 {
                seen[v as usize] = k as u32;
                let u = &mut uses[v as usize];
                if u.calls == 0 {
                    u.first = k as u32;
                }
                u.calls += 1;
                u.last = k as u32;
            }
        }
        if let Some(&last) = a.last() {
            uses[last as usize].returned_by += 1;
            uses[last as usize].producer = k as u32;
        }
    }
    for &v in inputs {
        uses[v as usize].pinned = true;
    }
    for &v in outputs {
        uses[v as usize].pinned = true;
        uses[v as usize].observed = true;
    }
    for &v in stateful {
        uses[v].pinned = true;
        uses[v].observed = true;
    }
    for chain in chains.iter() {
        for ins in chain {
            match *ins {
                Instr::Move { from, to } => {
                    uses[from as usize].pinned = true;
                    uses[to as usize].pinned = true;
                    uses[from as usize].observed = true;
                    uses[to as usize].observed = true;
                    uses[to as usize].written = true;
                }
                Instr::JumpFalse { cond, .. } => {
                    uses[cond as usize].pinned = true;
                    uses[cond as usize].observed = true;
                }
                // A delegate reads and writes its arguments outside the kernel calls.
                Instr::Delegate { args: a, .. } => {
                    for &v in &args[a.range()] {
                        uses[v as usize].pinned = true;
                        uses[v as usize].observed = true;
                        uses[v as usize].written = true;
                    }
                }
                _ => {}
            }
        }
    }
    // Tuple returns: a tensor list that is only the return slot of one call makes its items
    // returned (and referenced) by that call. Items of any other list are pinned.
    let mut return_list = vec![false; n];
    for (k, call) in calls.iter().enumerate() {
        let a = &args[call.args.range()];
        let Some(&l) = a.last() else { continue };
        let (l, u) = (l as usize, uses[l as usize]);
        let Value::TensorList(r) = values[l] else {
            continue;
        };
        if u.calls != 1 || u.returned_by != 1 || u.pinned {
            continue;
        }
        return_list[l] = true;
        for &i in pool.indices.get(r.range()).unwrap_or(&[]) {
            let i = i as usize;
            if i >= n {
                continue;
            }
            if !a.contains(&(i as u32)) {
                uses[i].first = if uses[i].calls == 0 {
                    k as u32
                } else {
                    uses[i].first.min(k as u32)
                };
                uses[i].calls += 1;
                uses[i].last = uses[i].last.max(k as u32);
            }
            uses[i].returned_by += 1;
            uses[i].producer = k as u32;
        }
    }
    for (l, v) in values.iter().enumerate() {
        if let Value::TensorList(r) | Value::OptionalTensorList(r) = v {
            if return_list[l] {
                continue;
            }
            for &i in pool.indices.get(r.range()).unwrap_or(&[]) {
                if let Some(u) = uses.get_mut(i as usize) {
                    u.pinned = true;
                    u.observed = true;
                }
            }
        }
    }
    Analysis {
        calls,
        uses,
        chain_jumps,
    }
}

/// Offers the method's calls to each partitioner and replaces the regions they take by
/// delegate calls. Returns (regions, calls replaced).
#[allow(clippy::too_many_arguments)]
fn partition_calls<'p>(
    values: &[Value<'p>],
    pool: &ListPool,
    args: &mut Vec<u32>,
    chains: &mut [Vec<Instr>],
    ops: &[Op],
    (inputs, outputs, stateful): (&[u32], &[u32], &[usize]),
    num_threads: usize,
    release: Option<&dyn PageRelease>,
    partitioners: &[Arc<dyn Partitioner>],
    (delegates, names): (&mut Vec<Box<dyn DelegateHandle + 'p>>, &mut Vec<String>),
) -> Result<(usize, usize)> {
    let (mut regions, mut replaced) = (0, 0);
    let op_names: Vec<&str> = ops.iter().map(|o| o.name.as_str()).collect();
    for p in partitioners {
        let Analysis {
            calls,
            uses,
            chain_jumps,
        } = analyze_calls(values, pool, args, chains, inputs, outputs, stateful);
        let hidden = vec![false; values.len()];
        let constants_read = core::cell::RefCell::new(Vec::new());
        let graph = Graph {
            values,
            pool,
            args,
            calls: &calls,
            op_names: &op_names,
            uses: &uses,
            chain_jumps: &chain_jumps,
            hidden: &hidden,
            num_threads,
            constants_read: Some(&constants_read),
            release,
        };
        let taken = p
            .partition(&CallGraph { graph: &graph })
            .map_err(|source| Error::Delegate {
                delegate: format!("{} partitioner", p.name()),
                source,
            })?;
        let mut after = 0;
        let mut edits = Vec::with_capacity(taken.len());
        for region in taken {
            let name = format!("{} region {}", p.name(), delegates.len());
            check_region(&graph, &region, after).map_err(|m| Error::Delegate {
                delegate: name.clone(),
                source: KernelError::invalid(m),
            })?;
            after = region.calls.end;
            edits.push((name, region));
        }
        for (name, region) in edits {
            let start = args.len() as u32;
            args.extend(
                region
                    .inputs
                    .iter()
                    .chain(&region.outputs)
                    .map(|&v| v as u32),
            );
            let r = ListRef {
                start,
                len: (region.inputs.len() + region.outputs.len()) as u32,
            };
            let view = ArgView {
                values,
                pool,
                args: &args[r.range()],
            };
            region
                .handle
                .check(&view)
                .map_err(|source| Error::Delegate {
                    delegate: name.clone(),
                    source,
                })?;
            for k in region.calls.clone() {
                let c = calls[k];
                chains[c.chain as usize][c.pc as usize] = if k == region.calls.start {
                    Instr::Delegate {
                        index: delegates.len() as u32,
                        args: r,
                    }
                } else {
                    Instr::Nop
                };
            }
            replaced += region.calls.len();
            regions += 1;
            delegates.push(region.handle);
            names.push(name);
        }
        // The partitioner copied these constants into its own layout.
        if let Some(release) = release {
            for vi in constants_read.into_inner() {
                if let Some(Value::Tensor(Tensor {
                    storage: Storage::Constant(b),
                    ..
                })) = values.get(vi)
                {
                    release.release(b);
                }
            }
        }
    }
    Ok((regions, replaced))
}

fn plan_calls(
    values: &[Value<'_>],
    pool: &ListPool,
    args: &mut [u32],
    chains: &mut [Vec<Instr>],
    ops: &[Op],
    inputs: &[u32],
    outputs: &[u32],
    stateful: &[usize],
    num_threads: usize,
    release: Option<&dyn PageRelease>,
) -> Result<Planned> {
    if !ops.iter().any(|o| o.kernel.prepare.is_some()) {
        return Ok(Planned::default());
    }
    let n = values.len();
    let Analysis {
        calls,
        uses,
        chain_jumps,
    } = analyze_calls(values, pool, args, chains, inputs, outputs, stateful);
    let op_names: Vec<&str> = ops.iter().map(|o| o.name.as_str()).collect();

    // Prepare every call; repeat with constant producers hidden where not every reader
    // absorbed them (hiding only grows, so this ends).
    let mut hidden = vec![false; n];
    let constants_read = core::cell::RefCell::new(Vec::new());
    let (states, fused_into, absorbed) = loop {
        let graph = Graph {
            values,
            pool,
            args,
            calls: &calls,
            op_names: &op_names,
            uses: &uses,
            chain_jumps: &chain_jumps,
            hidden: &hidden,
            num_threads,
            constants_read: Some(&constants_read),
            release: None,
        };
        let mut states: Vec<Option<Prepared>> = (0..calls.len()).map(|_| None).collect();
        // For each call fused into an earlier one: that call.
        let mut fused_into: Vec<Option<usize>> = vec![None; calls.len()];
        for k in 0..calls.len() {
            if fused_into[k].is_some() {
                continue;
            }
            let op = &ops[calls[k].op as usize];
            let Some(prep) = op.kernel.prepare else {
                continue;
            };
            let ctx = PrepareContext {
                graph: &graph,
                call: k,
                root: k,
            };
            let state = prep(&ctx).map_err(|e| Error::OperatorMissing {
                op: op.name.clone(),
                reason: format!("instruction {}: prepare: {e}", calls[k].pc),
            })?;
            let read = constants_read
                .try_borrow_mut()
                .map(|mut log| core::mem::take(&mut *log))
                .unwrap_or_default();
            let Some(state) = state else { continue };
            // The constants this kernel packed: their file pages are not needed any more
            // (a later read of them pages them back in).
            if let Some(release) = release {
                for vi in read {
                    if let Some(Value::Tensor(Tensor {
                        storage: Storage::Constant(b),
                        ..
                    })) = values.get(vi)
                    {
                        release.release(b);
                    }
                }
            }
            let mut cur = k;
            for _ in 0..state.fuses {
                cur = graph
                    .sole_consumer(cur, k)
                    .ok_or_else(|| Error::OperatorMissing {
                        op: op.name.clone(),
                        reason: format!(
                            "instruction {}: prepare fused a consumer that cannot be fused",
                            calls[k].pc
                        ),
                    })?;
                fused_into[cur] = Some(k);
            }
            states[k] = Some(state);
        }
        // Constant producers whose every reader absorbed them are removed.
        let mut absorbed = vec![false; calls.len()];
        let mut newly_hidden = Vec::new();
        for p in 0..calls.len() {
            if fused_into[p].is_some()
                || states[p].as_ref().is_some_and(|s| s.fuses > 0)
                || !graph.is_constant_call(p)
            {
                continue;
            }
            let Some(v) = graph.last_value(p) else {
                continue;
            };
            if hidden[v] {
                continue;
            }
            let mut all = true;
            let mut any = false;
            for (k, call) in calls.iter().enumerate() {
                if k == p {
                    continue;
                }
                let a = &args[call.args.range()];
                if !a.contains(&(v as u32)) {
                    continue;
                }
                let ok = fused_into[k].is_none()
                    && states[k].as_ref().is_some_and(|s| {
                        a.iter()
                            .enumerate()
                            .filter(|(_, &x)| x as usize == v)
                            .all(|(i, _)| s.absorbs_arg(i))
                    });
                if ok {
                    any = true;
                } else {
                    all = false;
                }
            }
            // At least one reader must have absorbed it: a call whose output no instruction
            // reads by value may still write memory that another value aliases (the memory
            // plan can give several values one buffer), so it stays.
            if all && any {
                absorbed[p] = true;
            } else if any {
                newly_hidden.push(v);
            }
        }
        if newly_hidden.is_empty() {
            break (states, fused_into, absorbed);
        }
        for v in newly_hidden {
            hidden[v] = true;
        }
    };

    // Fused calls write their last consumer's output; an output planned over memory the call
    // reads gets memory of its own.
    let mut stats = PlanStats::default();
    let mut rehome: Vec<usize> = Vec::new();
    for k in 0..calls.len() {
        let Some(s) = &states[k] else { continue };
        if s.fuses == 0 {
            continue;
        }
        let range = calls[k].args.range();
        let Some(old) = final_graph_primary(values, pool, args, &calls, &uses, k) else {
            continue;
        };
        let last = (k + 1..calls.len())
            .rev()
            .find(|&j| fused_into[j] == Some(k))
            .unwrap_or(k);
        let Some(new) = final_graph_primary(values, pool, args, &calls, &uses, last) else {
            continue;
        };
        let graph = Graph {
            values,
            pool,
            args,
            calls: &calls,
            op_names: &[],
            uses: &uses,
            chain_jumps: &[],
            hidden: &[],
            num_threads: 1,
            constants_read: None,
            release: None,
        };
        if graph.overlaps_args(new, k, old) {
            rehome.push(new);
        }
        for a in &mut args[range] {
            if *a as usize == old {
                *a = new as u32;
            }
        }
    }
    let mut kept = Vec::new();
    for (k, (call, state)) in calls.iter().zip(states).enumerate() {
        let ins = &mut chains[call.chain as usize][call.pc as usize];
        if fused_into[k].is_some() {
            *ins = Instr::Nop;
            stats.fused_calls += 1;
        } else if absorbed[k] {
            *ins = Instr::Nop;
            stats.absorbed_calls += 1;
        } else if let (Some(state), Instr::Kernel { state: slot, .. }) = (state, ins) {
            *slot = kept.len() as u32;
            kept.push(state);
        }
    }
    stats.prepared_calls = kept.len();
    stats.prepared_bytes = prepare::total_bytes(&kept);
    stats.scratch_bytes = prepare::max_scratch(&kept);
    let (homes, arena_bytes) = rehome_values(values, args, &calls, &uses, chains, &rehome);
    stats.rehomed_bytes = arena_bytes;
    Ok(Planned {
        states: kept,
        stats,
        homes,
        arena_bytes,
    })
}

/// The result of [`plan_calls`].
#[derive(Default)]
struct Planned {
    states: Vec<Prepared>,
    stats: PlanStats,
    /// (value, offset in the extra arena) for values given memory of their own.
    homes: Vec<(usize, usize)>,
    arena_bytes: usize,
}

/// Places the `rehome` values in one extra arena, sharing bytes between values whose
/// lifetimes (first to last instruction naming them, in execution order) do not overlap.
fn rehome_values(
    values: &[Value<'_>],
    args: &[u32],
    calls: &[Call],
    uses: &[Uses],
    chains: &[Vec<Instr>],
    rehome: &[usize],
) -> (Vec<(usize, usize)>, usize) {
    if rehome.is_empty() {
        return (Vec::new(), 0);
    }
    // Global position of each call.
    let mut base = Vec::with_capacity(chains.len());
    let mut total = 0usize;
    for c in chains {
        base.push(total);
        total += c.len();
    }
    let pos = |c: &Call| base[c.chain as usize] + c.pc as usize;
    let mut items: Vec<(usize, usize, usize, usize)> = Vec::new(); // (start, end, value, size)
    for &v in rehome {
        let Value::Tensor(t) = &values[v] else {
            continue;
        };
        let mut start = usize::MAX;
        let mut end = 0;
        for c in calls {
            if args[c.args.range()].contains(&(v as u32)) {
                start = start.min(pos(c));
                end = end.max(pos(c));
            }
        }
        if uses[v].pinned || start == usize::MAX {
            // Observable outside the calls (or never named): live throughout.
            start = 0;
            end = usize::MAX;
        }
        let size = t.capacity.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        items.push((start, end, v, size));
    }
    items.sort();
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // (offset, size, start, end)
    let mut homes = Vec::new();
    let mut arena = 0usize;
    for &(start, end, v, size) in &items {
        // Lowest offset not overlapping a placed value whose lifetime overlaps this one.
        let mut live: Vec<(usize, usize)> = placed
            .iter()
            .filter(|p| p.2 <= end && start <= p.3)
            .map(|p| (p.0, p.1))
            .collect();
        live.sort();
        let mut off = 0;
        for (o, s) in live {
            if off + size <= o {
                break;
            }
            off = off.max(o + s);
        }
        placed.push((off, size, start, end));
        homes.push((v, off));
        arena = arena.max(off + size);
    }
    (homes, arena)
}

/// [`Graph::primary_output`] outside a planning pass.
fn final_graph_primary(
    values: &[Value<'_>],
    pool: &ListPool,
    args: &[u32],
    calls: &[Call],
    uses: &[Uses],
    c: usize,
) -> Option<usize> {
    let graph = Graph {
        values,
        pool,
        args,
        calls,
        op_names: &[],
        uses,
        chain_jumps: &[],
        hidden: &[],
        num_threads: 1,
        constants_read: None,
        release: None,
    };
    graph.primary_output(c)
}

/// Looks up each delegate's backend and initialises it (payload, compile specs, named data).
/// Named data that remembers the bytes it handed out (to release their pages after a backend
/// packed them).
struct RecordingNamedData<'p> {
    inner: ProgramNamedData<'p>,
    handed_out: core::cell::RefCell<Vec<&'p [u8]>>,
}

impl<'p> NamedDataMap<'p> for RecordingNamedData<'p> {
    fn get(&self, key: &str) -> core::result::Result<Option<&'p [u8]>, pteron_format::FormatError> {
        let got = self.inner.get(key)?;
        if let (Some(b), Ok(mut log)) = (got, self.handed_out.try_borrow_mut()) {
            log.push(b);
        }
        Ok(got)
    }
}

fn init_delegates<'p>(
    src: &DataSources<'p>,
    plan: &schema::ExecutionPlan<'p>,
    method_name: &str,
    options: &LoadOptions,
) -> Result<(Vec<Box<dyn DelegateHandle + 'p>>, Vec<String>)> {
    let mut handles: Vec<Box<dyn DelegateHandle + 'p>> = Vec::new();
    let mut names = Vec::new();
    let named = RecordingNamedData {
        inner: ProgramNamedData {
            program: src.program,
            external: src.external,
        },
        handed_out: core::cell::RefCell::new(Vec::new()),
    };
    let num_threads = options
        .parallel
        .as_ref()
        .map_or(1, |p| p.num_threads().max(1));
    for (i, d) in plan.delegates().into_iter().flatten().enumerate() {
        let id = d.id().unwrap_or("");
        let backend = options
            .backends
            .get(id)
            .ok_or_else(|| Error::BackendMissing {
                backend: id.to_string(),
            })?;
        let name = format!("{id} delegate {i}");
        let fail = |source: KernelError| Error::Delegate {
            delegate: name.clone(),
            source,
        };
        let processed = d
            .processed()
            .ok_or_else(|| fail(KernelError::invalid("no processed payload")))?;
        let processed = src.program.delegate_data(processed)?;
        let mut specs = Vec::new();
        for s in d.compile_specs().into_iter().flatten() {
            specs.push(CompileSpec {
                key: s.key().unwrap_or(""),
                value: s.value().map_or(&[][..], |v| v.bytes()),
            });
        }
        let init = BackendInit {
            method_name,
            delegate_index: i,
            processed,
            compile_specs: &specs,
            named_data: &named,
            num_threads,
            config: options.config,
        };
        handles.push(backend.init(&init).map_err(fail)?);
        names.push(name);
        // A backend packs what it needs at init: the payload and the named data it read may
        // leave resident memory (pages a handle still reads fault back in).
        if let Some(release) = src.release {
            release.release(processed);
            let read = named
                .handed_out
                .try_borrow_mut()
                .map(|mut v| core::mem::take(&mut *v))
                .unwrap_or_default();
            for bytes in read {
                release.release(bytes);
            }
        }
    }
    Ok((handles, names))
}

/// Planned tensor location from `allocation_info`, checked against the arena sizes.
fn planned(
    a: &schema::AllocationDetails<'_>,
    nbytes: usize,
    arenas: &[usize],
) -> Result<(u32, usize)> {
    let id = a.memory_id();
    let arena = id
        .checked_sub(1)
        .ok_or_else(|| invalid("memory_id 0 is reserved"))?;
    let size = *arenas.get(arena as usize).ok_or_else(|| {
        invalid(format!(
            "memory_id {id} but the plan has {} buffers",
            arenas.len()
        ))
    })?;
    let offset = (a.memory_offset_low() as u64) | ((a.memory_offset_high() as u64) << 32);
    match offset.checked_add(nbytes as u64) {
        Some(end) if end <= size as u64 => Ok((arena, offset as usize)),
        _ => Err(invalid(format!("tensor at offset {offset} with {nbytes} bytes overruns planned buffer {id} of {size} bytes"))),
    }
}

/// One kernel call, as an [`ExecutionObserver`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct KernelEvent<'a> {
    pub chain: usize,
    /// Instruction index within the chain.
    pub instruction: usize,
    /// Index into the method's operator table (see [`Method::operator_names`]).
    pub op_index: usize,
    pub op: &'a str,
}

/// Hooks around every kernel call of [`Method::execute_observed`]: profilers and tracers
/// implement it (the core has no clock of its own).
pub trait ExecutionObserver {
    fn kernel_begin(&mut self, event: &KernelEvent<'_>);
    fn kernel_end(&mut self, event: &KernelEvent<'_>);
}

struct NoObserver;

impl ExecutionObserver for NoObserver {
    fn kernel_begin(&mut self, _: &KernelEvent<'_>) {}
    fn kernel_end(&mut self, _: &KernelEvent<'_>) {}
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
