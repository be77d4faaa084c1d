//! The cost of one `parallel_for` of the thread pool: back-to-back jobs of 8 tasks that do
//! (almost) nothing, as between the many small kernels of a network. Mean µs per job.
//! `cargo run --release -p pteron --example pool_bench [THREADS]`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use pteron::ThreadPool;
use pteron_core::Parallel;

fn main() {
    let threads = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let pool = ThreadPool::new(threads).unwrap();
    let hits = AtomicUsize::new(0);
    for work in [0usize, 1000, 10000] {
        let jobs = 20000;
        let t = Instant::now();
        for _ in 0..jobs {
            pool.parallel_for(8, &|r| {
                let mut x = 0u64;
                for i in 0..work * r.len() {
                    x = x.wrapping_add(std::hint::black_box(i as u64));
                }
                hits.fetch_add(x as usize & 1, Ordering::Relaxed);
            });
        }
        let per = t.elapsed().as_secs_f64() / jobs as f64;
        println!(
            "{threads} threads, {work:5} adds per task: {:6.2} us per job",
            per * 1e6
        );
    }
    std::hint::black_box(hits.load(Ordering::Relaxed));
}
