//! Per-op timing of a method's execution: a table of time per operator, and Chrome-trace events.

use std::time::{Duration, Instant};

use pteron_core::{ExecutionObserver, KernelEvent, Method};

/// Times every kernel call of `Method::execute_observed`.
///
/// ```no_run
/// # fn f(method: &mut pteron::core::Method) -> pteron::Result<()> {
/// let mut profiler = pteron::Profiler::new(method);
/// method.execute_observed(&mut profiler)?;
/// for row in profiler.summary() {
///     println!("{:<40} {:>6} calls {:>10.3} ms", row.op, row.calls, row.total.as_secs_f64() * 1e3);
/// }
/// # Ok(()) }
/// ```
pub struct Profiler {
    names: Vec<String>,
    totals: Vec<(u64, Duration)>,
    origin: Instant,
    started: Option<Instant>,
    /// (op index, start since origin, duration) of each call, when tracing.
    events: Option<Vec<(usize, Duration, Duration)>>,
}

/// Time spent in one operator over all its calls.
#[derive(Clone, Debug)]
pub struct OpTime {
    pub op: String,
    pub calls: u64,
    pub total: Duration,
}

impl Profiler {
    /// A profiler for `method`'s operators (aggregates only).
    pub fn new(method: &Method<'_>) -> Self {
        let names: Vec<String> = method.operator_names().map(str::to_string).collect();
        let totals = vec![(0, Duration::ZERO); names.len()];
        Profiler {
            names,
            totals,
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
            .filter(|(_, (calls, _))| *calls > 0)
            .map(|(op, &(calls, total))| OpTime {
                op: op.clone(),
                calls,
                total,
            })
            .collect();
        rows.sort_by(|a, b| b.total.cmp(&a.total).then(a.op.cmp(&b.op)));
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
        }
        if let Some(events) = &mut self.events {
            events.push((event.op_index, start - self.origin, dur));
        }
    }
}
