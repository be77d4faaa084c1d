#!/usr/bin/env bash
# Library crates are steered only through their API: no environment variables, no printing, and
# one CPU-feature detection (pteron-kernels-cpu's `cpu` module). The facade's thread pool is the
# one place that asks how many CPUs there are (`default_threads`). Fails listing any other use.
set -u
cd "$(dirname "$0")/../.."
libs=(pteron-format pteron-core pteron-kernels pteron-kernels-cpu pteron-nhwc pteron-xnnpack
      pteron pteron-llm pteron-audio pteron-serve pteron-c pteron-gpu)
pattern='env::var|eprintln!|println!|eprint!|[^a-z_]print!|dbg!|is_x86_feature_detected|is_aarch64_feature_detected|available_parallelism'
allowed='^crates/pteron-kernels-cpu/src/cpu\.rs:|^crates/pteron/src/threads\.rs:.*available_parallelism'
hits=$(for c in "${libs[@]}"; do grep -rnE "$pattern" "crates/$c/src"; done |
  grep -vE '^[^:]+:[0-9]+:\s*//' | grep -vE "$allowed")
if [ -n "$hits" ]; then
  echo "library code reads the environment, prints or probes the CPU outside crates/pteron-kernels-cpu/src/cpu.rs:"
  echo "$hits"
  exit 1
fi
echo "steering: library crates read no environment, print nothing, probe the CPU in one place"
