//! `pteron run`: execute a method on .npy inputs (or deterministic ones) and save its outputs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pteron::{npy, thread_cpu_time, RunMethod, ScalarType, Tensor, Value};
use pteron::{Method, ValueSpec as CoreValue};

#[derive(clap::Args)]
pub struct RunArgs {
    /// The .pte program.
    model: PathBuf,
    /// Method to run.
    #[arg(long, default_value = "forward")]
    method: String,
    /// Input tensors as .npy files, in the method's input order.
    #[arg(long = "input", short = 'i')]
    inputs: Vec<PathBuf>,
    /// Write output0.npy, output1.npy, … into this directory.
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Execute this many times and report the median time.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// External data file (.ptd) for programs that keep weights outside the .pte.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Print the time spent per operator, most expensive first.
    #[arg(long)]
    profile: bool,
    /// With --profile: how many of the most expensive call sites to list.
    #[arg(long, default_value_t = 20)]
    sites: usize,
    /// Write a Chrome trace (JSON) of every kernel call of the last run to this file.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Expected outputs as .npy files, in output order: prints the max abs error of each.
    #[arg(long = "expect")]
    expected: Vec<PathBuf>,
    /// Threads for kernels (default: the number of physical cores; 1 starts no thread).
    #[arg(long)]
    threads: Option<usize>,
    /// Use only the portable reference kernels (no SIMD kernels, no packing, no fusion).
    #[arg(long)]
    portable: bool,
    /// Keep the convolutions of portable programs in their channels-first order (by default
    /// runs of convolution calls run channels-last, as one region each).
    #[arg(long)]
    channels_first: bool,
    /// Print the time of the channels-last engine's nodes (XNNPACK delegates and
    /// channels-last regions) per run: by node type, then the slowest nodes (`slowest`) or
    /// every node in order (`all`). Default: the `PTERON_XNNPACK_PROFILE` environment
    /// variable (`all`, or any other value for `slowest`).
    #[arg(long, value_enum)]
    profile_nodes: Option<NodeReport>,
    /// Which chains of convolutions the engine fuses: `off`, `default` (large maps), `all`.
    /// Default: the `PTERON_XNNPACK_FUSE` environment variable (`0` or `all`), else `default`.
    #[arg(long, value_enum)]
    fuse: Option<Fuse>,
    #[command(flatten)]
    device: crate::device::DeviceArgs,
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum NodeReport {
    Slowest,
    All,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Fuse {
    Off,
    Default,
    All,
}

/// The engine options of `args` (flags, else the environment variables the CLI has long read).
fn engine_options(args: &RunArgs) -> (pteron::EngineOptions, Option<NodeReport>) {
    let report = args.profile_nodes.or_else(|| {
        std::env::var("PTERON_XNNPACK_PROFILE").ok().map(|v| {
            if v == "all" {
                NodeReport::All
            } else {
                NodeReport::Slowest
            }
        })
    });
    let fuse = match args.fuse {
        Some(Fuse::Off) => pteron::FusePolicy::Off,
        Some(Fuse::Default) => pteron::FusePolicy::Default,
        Some(Fuse::All) => pteron::FusePolicy::All,
        None => match std::env::var("PTERON_XNNPACK_FUSE").as_deref() {
            Ok("0") => pteron::FusePolicy::Off,
            Ok("all") => pteron::FusePolicy::All,
            _ => pteron::FusePolicy::Default,
        },
    };
    let mut options = pteron::EngineOptions::new().fuse(fuse);
    if report.is_some() {
        options = options.profile(std::sync::Arc::new(pteron::NodeProfile::new()));
    }
    (options, report)
}

/// A deterministic input for a declared tensor: floats in [-1, 1), small non-negative ints.
fn synthetic_input(index: usize, dtype: ScalarType, sizes: &[usize]) -> pteron::Result<Tensor> {
    let n: usize = sizes.iter().product();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let data: Vec<u8> = match dtype {
        ScalarType::Float => (0..n)
            .flat_map(|_| (((next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0).to_le_bytes())
            .collect(),
        ScalarType::Double => (0..n)
            .flat_map(|_| (((next() >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0).to_le_bytes())
            .collect(),
        ScalarType::Long => (0..n)
            .flat_map(|_| ((next() % 10) as i64).to_le_bytes())
            .collect(),
        ScalarType::Int => (0..n)
            .flat_map(|_| ((next() % 10) as i32).to_le_bytes())
            .collect(),
        ScalarType::Bool => (0..n).map(|_| (next() & 1) as u8).collect(),
        ScalarType::Byte | ScalarType::Char => (0..n).map(|_| (next() % 10) as u8).collect(),
        other => {
            return Err(pteron::Error::Invalid(format!(
                "input {index}: no synthetic data for {other}; pass --input"
            )))
        }
    };
    Tensor::new(dtype, sizes, data)
}

fn inputs_for(method: &Method<'_>, args: &RunArgs) -> pteron::Result<Vec<Tensor>> {
    if !args.inputs.is_empty() {
        if args.inputs.len() != method.num_inputs() {
            return Err(pteron::Error::Invalid(format!(
                "method {} takes {} inputs, {} given",
                method.name(),
                method.num_inputs(),
                args.inputs.len()
            )));
        }
        return args.inputs.iter().map(npy::read).collect();
    }
    (0..method.num_inputs())
        .map(|i| match method.input_spec(i) {
            Some(CoreValue::Tensor(t)) => synthetic_input(i, t.info.dtype(), t.info.sizes()),
            Some(v) => Err(pteron::Error::Invalid(format!(
                "input {i} is a {}: pass it explicitly",
                v.kind()
            ))),
            None => unreachable!("index within num_inputs"),
        })
        .collect()
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn preview(t: &Tensor) -> String {
    match t.to_f64_vec() {
        Some(v) => {
            let head: Vec<String> = v.iter().take(6).map(|x| format!("{x:.6}")).collect();
            let more = if v.len() > 6 { ", …" } else { "" };
            format!("[{}{more}]", head.join(", "))
        }
        None => String::new(),
    }
}

pub fn run(args: &RunArgs) -> pteron::Result<()> {
    let t0 = Instant::now();
    let file = pteron::ProgramFile::open(&args.model)?;
    let data_file = args
        .data
        .as_ref()
        .map(pteron::ProgramFile::open)
        .transpose()?;
    let (engine, node_report) = engine_options(args);
    let node_profile = engine.profile.clone();
    let mut runtime = pteron::Runtime::builder()
        .threads(args.threads.unwrap_or(0))
        .engine(engine);
    if args.portable {
        runtime = runtime.portable();
    }
    let runtime = runtime.channels_last(!args.portable && !args.channels_first);
    let (runtime, adapter) = crate::device::install(runtime, &args.device)?;
    let runtime = runtime.build()?;
    let mut program = runtime.load_program(&file)?;
    if let Some(d) = &data_file {
        program = program.with_external_data(d.data_file()?);
    }
    let mut method = program
        .load_method(&args.method)
        .map_err(|e| crate::device::vulkan_hint(e, adapter.as_deref()))?;
    let load = t0.elapsed();

    let inputs = inputs_for(&method, args)?;
    let mut times = Vec::new();
    let mut cpu_times = Vec::new();
    let mut outputs = Vec::new();
    let mut profiler =
        (args.profile || args.trace.is_some()).then(|| pteron::Profiler::new(&method));
    let runs = args.repeat.max(1);
    for k in 0..runs {
        for (i, t) in inputs.iter().enumerate() {
            method.set_input_tensor(i, t.dtype, &t.sizes, &t.data)?;
        }
        if k + 1 == runs && args.trace.is_some() {
            profiler = profiler.map(|p| p.with_trace());
        }
        let t = Instant::now();
        let c = thread_cpu_time();
        match &mut profiler {
            Some(p) => method.execute_observed(p)?,
            None => method.execute()?,
        }
        times.push(t.elapsed());
        if let (Some(c0), Some(c1)) = (c, thread_cpu_time()) {
            cpu_times.push(c1.saturating_sub(c0));
        }
        if k + 1 == runs {
            outputs = method.outputs()?;
        }
    }
    times.sort();
    let median = times[times.len() / 2];
    cpu_times.sort();

    if let Some(dir) = &args.output_dir {
        std::fs::create_dir_all(dir).map_err(|source| pteron::Error::Io {
            path: dir.display().to_string(),
            source,
        })?;
    }
    for (k, out) in outputs.iter().enumerate() {
        match out {
            Value::Tensor(t) => {
                println!("output {k}: {}{:?} {}", t.dtype, t.sizes, preview(t));
                if let Some(dir) = &args.output_dir {
                    npy::write(dir.join(format!("output{k}.npy")), t)?;
                }
            }
            other => {
                println!("output {k}: {other:?}");
                if let Some(dir) = &args.output_dir {
                    let t = match other {
                        Value::Int(v) => Tensor::from_i64(&[], &[*v]),
                        Value::Double(v) => {
                            Tensor::new(ScalarType::Double, &[], v.to_le_bytes().to_vec())?
                        }
                        Value::Bool(v) => Tensor::new(ScalarType::Bool, &[], vec![*v as u8])?,
                        _ => continue,
                    };
                    npy::write(dir.join(format!("output{k}.npy")), &t)?;
                }
            }
        }
    }
    for (k, path) in args.expected.iter().enumerate() {
        let want = npy::read(path)?;
        let got = match outputs.get(k) {
            Some(Value::Tensor(t)) => t,
            _ => {
                return Err(pteron::Error::Invalid(format!(
                    "output {k} is not a tensor to compare"
                )))
            }
        };
        if got.dtype != want.dtype || got.sizes != want.sizes {
            println!(
                "output {k}: MISMATCH: got {}{:?}, expected {}{:?}",
                got.dtype, got.sizes, want.dtype, want.sizes
            );
            continue;
        }
        let (g, w) = (
            got.to_f64_vec().unwrap_or_default(),
            want.to_f64_vec().unwrap_or_default(),
        );
        let err = g.iter().zip(&w).fold(0.0f64, |m, (a, b)| {
            if (a - b).is_nan() {
                f64::INFINITY
            } else {
                m.max((a - b).abs())
            }
        });
        let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        println!(
            "output {k}: max abs error {err:.3e} vs {} (max |expected| {scale:.3e})",
            path.display()
        );
    }
    if let (Some(p), Some(report)) = (&node_profile, node_report) {
        eprint!("{}", p.report(report == NodeReport::All));
    }
    if let Some(p) = &profiler {
        if args.profile {
            print_profile(p, runs, args.sites);
        }
        if let Some(path) = &args.trace {
            std::fs::write(path, p.chrome_trace()).map_err(|source| pteron::Error::Io {
                path: path.display().to_string(),
                source,
            })?;
            println!("trace written to {}", path.display());
        }
    }
    let plan = method.plan_stats();
    // CPU time of the calling thread: on a busy machine, the single-threaded cost without the
    // time other processes held the core (with threads, the workers' time is not included).
    let cpu = cpu_times
        .get(cpu_times.len() / 2)
        .map(|c| format!(", calling thread's CPU time {} (median)", ms(*c)))
        .unwrap_or_default();
    println!(
        "load {}, execute {} (median of {}, fastest {}), {} thread(s){cpu}",
        ms(load),
        ms(median),
        times.len(),
        ms(times[0]),
        method.num_threads()
    );
    println!(
        "planned memory {} bytes, packed weights {} bytes ({} prepared calls, {} fused, {} absorbed), scratch {} bytes",
        method.planned_bytes(),
        plan.prepared_bytes,
        plan.prepared_calls,
        plan.fused_calls,
        plan.absorbed_calls,
        plan.scratch_bytes
    );
    if plan.regions > 0 {
        let kind = match &adapter {
            Some(name) => format!("GPU region(s) on {name}"),
            None => "region(s) (channels-last, fused blocks)".to_string(),
        };
        println!(
            "{} {kind} of {} calls, holding {} bytes of packed weights and buffers",
            plan.regions,
            plan.partitioned_calls,
            method.delegate_bytes()
        );
    } else if let Some(name) = &adapter {
        println!(
            "no portable call of this method runs on the GPU engine ({name}); Vulkan delegates do"
        );
    }
    if let Some(kib) = status_kib("VmHWM:") {
        let mib = |k: u64| k as f64 / 1024.0;
        let now = match (status_kib("RssAnon:"), status_kib("RssFile:")) {
            (Some(a), Some(f)) => format!(
                " (resident now: {:.1} MiB heap, {:.1} MiB file-backed)",
                mib(a),
                mib(f)
            ),
            _ => String::new(),
        };
        println!("peak memory (VmHWM) {:.1} MiB{now}", mib(kib));
    }
    Ok(())
}

/// The process's resident-set high-water mark, from /proc/self/status (Linux).
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The per-operator table: time per run (averaged over `runs`), calls per run, share of the total.
fn print_profile(p: &pteron::Profiler, runs: usize, sites: usize) {
    let rows = p.summary();
    let total: f64 = rows.iter().map(|r| r.total.as_secs_f64()).sum();
    println!(
        "{:<48} {:>7} {:>12} {:>7} {:>9} {:>12}",
        "operator", "calls", "ms/run", "share", "GFLOP/s", "best ms/run"
    );
    for r in &rows {
        let ms = r.total.as_secs_f64() * 1e3 / runs as f64;
        let share = if total > 0.0 {
            r.total.as_secs_f64() / total * 100.0
        } else {
            0.0
        };
        let rate = r
            .flops_per_second()
            .map(|f| format!("{:9.1}", f / 1e9))
            .unwrap_or_default();
        // Delegate calls are not kernel call sites: no per-site minimum.
        let best = if r.best_total.is_zero() {
            "-".to_string()
        } else {
            format!("{:.3}", r.best_total.as_secs_f64() * 1e3 / runs as f64)
        };
        println!(
            "{:<48} {:>7} {:>12.3} {:>6.1}% {rate:>9} {best:>12}",
            r.op,
            r.calls / runs as u64,
            ms,
            share
        );
    }
    let best: f64 = rows.iter().map(|r| r.best_total.as_secs_f64()).sum();
    println!(
        "{:<48} {:>7} {:>12.3} {:>7} {:>9} {:>12.3}",
        "total (kernels)",
        "",
        total * 1e3 / runs as f64,
        "",
        "",
        best * 1e3 / runs as f64
    );
    println!("\nmost expensive call sites (fastest call of each; shapes of the tensor arguments):");
    println!(
        "{:>5} {:<36} {:>10} {:>9}  shapes",
        "instr", "operator", "best ms", "GFLOP/s"
    );
    for s in p.sites().iter().take(sites) {
        let rate = s
            .best_flops_per_second()
            .map(|f| format!("{:9.1}", f / 1e9))
            .unwrap_or_default();
        println!(
            "{:>5} {:<36} {:>10.3} {rate:>9}  {}",
            s.instruction,
            s.op.trim_start_matches("aten::"),
            s.best.as_secs_f64() * 1e3,
            s.shapes
        );
    }
}
