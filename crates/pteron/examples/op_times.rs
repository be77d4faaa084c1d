//! Per-instruction kernel times over many runs (median and minimum per call site), for
//! finding slow kernels on a noisy machine.
//!
//! `cargo run --release -p pteron --example op_times -- MODEL.pte THREADS RUNS [input.npy ...]`

use std::time::{Duration, Instant};

use pteron::{ExecutionObserver, KernelEvent};

struct Rec {
    start: Option<Instant>,
    runs: Vec<Vec<(usize, usize, String, Duration)>>,
}

impl ExecutionObserver for Rec {
    fn kernel_begin(&mut self, _: &KernelEvent<'_>) {
        self.start = Some(Instant::now());
    }
    fn kernel_end(&mut self, e: &KernelEvent<'_>) {
        let d = self.start.take().map(|s| s.elapsed()).unwrap_or_default();
        if let Some(r) = self.runs.last_mut() {
            r.push((e.chain, e.instruction, e.op.to_string(), d));
        }
    }
}

fn main() -> pteron::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let file = pteron::ProgramFile::open(&args[1])?;
    let threads: usize = args[2].parse().unwrap();
    let runs: usize = args[3].parse().unwrap();
    let program = pteron::Runtime::new().load_program(&file)?;
    let mut m =
        program.load_method_with("forward", pteron::MethodOptions::new().threads(threads))?;
    let inputs: Vec<pteron::Tensor> = args[4..]
        .iter()
        .map(pteron::npy::read)
        .collect::<pteron::Result<_>>()?;
    let mut rec = Rec {
        start: None,
        runs: Vec::new(),
    };
    let mut totals = Vec::new();
    for _ in 0..runs {
        for (i, t) in inputs.iter().enumerate() {
            m.set_input_tensor(i, t.dtype, &t.sizes, &t.data)?;
        }
        rec.runs.push(Vec::new());
        let t = Instant::now();
        m.execute_observed(&mut rec)?;
        totals.push(t.elapsed());
    }
    totals.sort();
    let n = rec.runs[0].len();
    let (mut sum_med, mut sum_min) = (0.0, 0.0);
    for k in 0..n {
        let mut d: Vec<f64> = rec
            .runs
            .iter()
            .map(|r| r[k].3.as_secs_f64() * 1e6)
            .collect();
        d.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let (med, min) = (d[d.len() / 2], d[0]);
        sum_med += med;
        sum_min += min;
        let (c, i, op, _) = &rec.runs[0][k];
        println!("{c}:{i:<5} {op:<48} median {med:9.1} us  min {min:9.1} us");
    }
    println!(
        "sum of medians {:.3} ms, sum of minimums {:.3} ms, median run {:.3} ms, min run {:.3} ms",
        sum_med / 1e3,
        sum_min / 1e3,
        totals[totals.len() / 2].as_secs_f64() * 1e3,
        totals[0].as_secs_f64() * 1e3
    );
    Ok(())
}
