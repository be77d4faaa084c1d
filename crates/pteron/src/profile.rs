//! Per-op timing of a method's execution: a table of time per operator, and Chrome-trace events.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pteron_core::{ExecutionObserver, KernelEvent, Method};

/// Times every kernel call of `Method::execute_observed`.
///
/// ```no_run
/// # fn f(method: &mut pteron::Method) -> pteron::Result<()> {
/// let mut profiler = pteron::Profiler::new(method);
/// method.execute_observed(&mut profiler)?;
/// for row in profiler.summary() {
///     println!("{:<40} {:>6} calls {:>10.3} ms", row.op, row.calls, row.total.as_secs_f64() * 1e3);
/// }
/// # Ok(()) }
/// ```
pub struct Profiler {
    names: Vec<String>,
    /// Per operator: calls, time, FLOPs of the calls whose work is known.
    totals: Vec<(u64, Duration, u64)>,
    /// Per kernel call site (chain, instruction): FLOPs where known, argument shapes, calls
    /// and the fastest call.
    sites: HashMap<(usize, usize), Site>,
    origin: Instant,
    started: Option<Instant>,
    /// (op index, start since origin, duration) of each call, when tracing.
    events: Option<Vec<(usize, Duration, Duration)>>,
}

#[derive(Clone, Debug, Default)]
struct Site {
    op: String,
    flops: u64,
    shapes: String,
    calls: u64,
    best: Option<Duration>,
}

/// Time spent in one operator over all its calls.
#[derive(Clone, Debug)]
pub struct OpTime {
    pub op: String,
    pub calls: u64,
    pub total: Duration,
    /// The total if every call had taken as long as the fastest call at its call site: on a
    /// machine shared with other work, a steadier measure of the kernels' own speed.
    pub best_total: Duration,
    /// Floating-point operations of those calls, where the work is known (convolution,
    /// matrix products: 2 per multiply-add); 0 otherwise.
    pub flops: u64,
}

impl OpTime {
    /// Achieved FLOP/s, where the work is known.
    pub fn flops_per_second(&self) -> Option<f64> {
        (self.flops > 0 && !self.total.is_zero())
            .then(|| self.flops as f64 / self.total.as_secs_f64())
    }
}

/// One kernel call site (an instruction of the method) and its fastest call.
#[derive(Clone, Debug)]
pub struct SiteTime {
    pub chain: usize,
    pub instruction: usize,
    pub op: String,
    /// Sizes of the call's tensor arguments, in argument order (planned shapes).
    pub shapes: String,
    pub calls: u64,
    pub best: Duration,
    /// FLOPs of one call, where known; 0 otherwise.
    pub flops: u64,
}

impl SiteTime {
    /// FLOP/s of the fastest call, where the work is known.
    pub fn best_flops_per_second(&self) -> Option<f64> {
        (self.flops > 0 && !self.best.is_zero())
            .then(|| self.flops as f64 / self.best.as_secs_f64())
    }
}

/// The sizes of a call's tensor arguments, e.g. `[1,32,112,112] [32,1,3,3]`.
fn call_shapes(a: &pteron_core::ArgView<'_, '_>) -> String {
    use pteron_core::ArgAccess;
    let mut out = String::new();
    for i in 0..a.num_args() {
        if let Ok(t) = a.tensor(i) {
            if !out.is_empty() {
                out.push(' ');
            }
            let dims: Vec<String> = (0..t.rank()).map(|d| t.size(d).to_string()).collect();
            out.push_str(&format!("[{}]", dims.join(",")));
        }
    }
    out
}

/// Floating-point operations of one call, for the ops whose work is known from their
/// argument shapes.
fn call_flops(op: &str, a: &pteron_core::ArgView<'_, '_>) -> Option<u64> {
    use pteron_core::ArgAccess;
    let numel = |i: usize| a.tensor(i).ok().map(|t| t.numel() as u64);
    let size = |i: usize, d: usize| {
        a.tensor(i)
            .ok()
            .filter(|t| d < t.rank())
            .map(|t| t.size(d) as u64)
    };
    let macs = match op {
        // out numel × (weight numel / out channels) = out × (C_in/groups · kernel taps)
        "aten::convolution.out" => {
            let w = a.tensor(1).ok()?;
            let per_out = (w.numel() as u64).checked_div(w.size(0) as u64)?;
            numel(9)? * per_out
        }
        "aten::addmm.out" => numel(5)? * size(1, 1)?,
        "aten::mm.out" => numel(2)? * size(0, 1)?,
        "aten::bmm.out" => numel(2)? * size(0, 2)?,
        "aten::linear.out" => numel(3)? * size(1, 1)?,
        _ => return None,
    };
    Some(2 * macs)
}

impl Profiler {
    /// A profiler for `method`'s operators (aggregates only).
    pub fn new(method: &Method<'_>) -> Self {
        let names: Vec<String> = method.operator_names().map(str::to_string).collect();
        let totals = vec![(0, Duration::ZERO, 0); names.len()];
        // Work and shapes per call site, from the planned shapes.
        let mut sites = HashMap::new();
        for (c, len) in method.chain_lengths().enumerate() {
            for pc in 0..len {
                if let Some((op, args)) = method.kernel_call(c, pc) {
                    let site = Site {
                        op: op.to_string(),
                        flops: call_flops(op, &args).unwrap_or(0),
                        shapes: call_shapes(&args),
                        ..Site::default()
                    };
                    sites.insert((c, pc), site);
                }
            }
        }
        Profiler {
            names,
            totals,
            sites,
            origin: Instant::now(),
            started: None,
            events: None,
        }
    }

    /// Also keeps every call as a trace event (see [`Profiler::chrome_trace`]).
    pub fn with_trace(mut self) -> Self {
        self.events = Some(Vec::new());
        self
    }

    /// Operators by total time, most expensive first.
    pub fn summary(&self) -> Vec<OpTime> {
        let mut rows: Vec<OpTime> = self
            .names
            .iter()
            .zip(&self.totals)
            .filter(|(_, (calls, _, _))| *calls > 0)
            .map(|(op, &(calls, total, flops))| OpTime {
                op: op.clone(),
                calls,
                total,
                best_total: Duration::ZERO,
                flops,
            })
            .collect();
        for site in self.sites() {
            if let Some(row) = rows.iter_mut().find(|r| r.op == site.op) {
                row.best_total += site.best * site.calls as u32;
            }
        }
        rows.sort_by(|a, b| b.total.cmp(&a.total).then(a.op.cmp(&b.op)));
        rows
    }

    /// Every call site that ran, by the time of its fastest call × its calls, most expensive
    /// first.
    pub fn sites(&self) -> Vec<SiteTime> {
        let mut rows: Vec<SiteTime> = self
            .sites
            .iter()
            .filter_map(|(&(chain, instruction), s)| {
                Some(SiteTime {
                    chain,
                    instruction,
                    op: s.op.clone(),
                    shapes: s.shapes.clone(),
                    calls: s.calls,
                    best: s.best?,
                    flops: s.flops,
                })
            })
            .collect();
        rows.sort_by(|a, b| {
            (b.best * b.calls as u32)
                .cmp(&(a.best * a.calls as u32))
                .then((a.chain, a.instruction).cmp(&(b.chain, b.instruction)))
        });
        rows
    }

    /// The recorded calls in Chrome's trace-event JSON format (open in chrome://tracing or
    /// Perfetto). Empty unless made [`Profiler::with_trace`].
    pub fn chrome_trace(&self) -> String {
        let mut out = String::from("{\"traceEvents\":[");
        for (k, &(op, start, dur)) in self.events.iter().flatten().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let name = self
                .names
                .get(op)
                .map_or("?", String::as_str)
                .replace('"', "'");
            out.push_str(&format!(
                "{{\"name\":\"{name}\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":1,\"tid\":1}}",
                start.as_secs_f64() * 1e6,
                dur.as_secs_f64() * 1e6
            ));
        }
        out.push_str("]}");
        out
    }
}

impl ExecutionObserver for Profiler {
    fn kernel_begin(&mut self, _: &KernelEvent<'_>) {
        self.started = Some(Instant::now());
    }

    fn kernel_end(&mut self, event: &KernelEvent<'_>) {
        let Some(start) = self.started.take() else {
            return;
        };
        let dur = start.elapsed();
        if let Some(t) = self.totals.get_mut(event.op_index) {
            t.0 += 1;
            t.1 += dur;
            if let Some(site) = self.sites.get_mut(&(event.chain, event.instruction)) {
                t.2 += site.flops;
                site.calls += 1;
                site.best = Some(site.best.map_or(dur, |b| b.min(dur)));
            }
        }
        if let Some(events) = &mut self.events {
            events.push((event.op_index, start - self.origin, dur));
        }
    }
}
