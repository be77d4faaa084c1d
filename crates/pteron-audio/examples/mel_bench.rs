//! Time of Whisper's log-mel front end on one 30 s window.
//!
//!     cargo run --release -p pteron-audio --example mel_bench

use std::time::Instant;

use pteron_audio::mel::{LogMel, HOP};

fn main() {
    let n = 3000 * HOP;
    let samples: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.01).sin() * 0.1).collect();
    let mel = LogMel::new(80);
    let best = (0..5)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(mel.features(&samples, n));
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min);
    println!("log-mel, 30 s window: {best:.2} ms");
}
