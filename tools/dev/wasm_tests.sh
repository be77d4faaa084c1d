#!/usr/bin/env bash
# WebAssembly: the JavaScript package's module builds for the browser target
# (wasm32-unknown-unknown, SIMD128: web/build.sh) and its tests run under node and, through the
# demo page, in headless Chromium (web/test/); the kernel, op-conformance, fixture, speech and
# LLM suites run as wasm32-wasip1 programs under node (same code, same SIMD128 kernels; WASI
# only gives the tests their files). Single threaded: wasm32 without atomics has no threads
# (ThreadPool falls back to the caller alone).
# Facts: ../shared/docs/targets.md. Not run here: tests that need threads or unwinding (the
# tokenizer fuzz corpus catches panics; wasm aborts on panic).
# Usage: tools/dev/wasm_tests.sh            (installs the Debian packages when missing)
set -euo pipefail
cd "$(dirname "$0")/../.."

source tools/dev/apt_install.sh
apt_install rustc-web cargo-web rust-web-src lld-19 wasi-libc chromium
# node and npm: the machine's own when it has them (a NodeSource nodejs ships npm, and Debian's
# npm package then conflicts with it), else Debian's.
command -v node >/dev/null 2>&1 || apt_install nodejs
command -v npm >/dev/null 2>&1 || apt_install npm

source tools/dev/wasm_env.sh
/usr/bin/cargo --version
node --version

echo "wasm: the JavaScript package's module (wasm32-unknown-unknown, +simd128), under node"
bash web/build.sh
node web/test/node.mjs
echo "wasm: the demo page in headless Chromium (playwright-core from npm)"
(cd web && npm ci --no-audit --no-fund >/dev/null)
node web/test/page.mjs

# One package selection and one cargo run for every suite: each other selection would unify
# other features and compile the workspace again. No debug info: links sooner.
export CARGO_PROFILE_RELEASE_DEBUG=false
echo "wasm: kernels, engine, op conformance, fixtures, speech and LLM suites under node"
echo "(wasm32-wasip1, +simd128)"
"${wasm_cargo[@]}" test --release --locked --target wasm32-wasip1 --target-dir target/wasm \
  -p pteron-kernels-cpu -p pteron-kernels -p pteron-nhwc -p pteron -p pteron-audio -p pteron-llm \
  --test activations --test attention --test conv --test copies --test cpu_cap \
  --test dwconv --test gemm --test math --test rows --test dtypes \
  --test ops_cpu --test golden --test xnnpack \
  --test mel --test transcribe --test vad --test whisper \
  --test tiny --test tiny_xnnpack --test speculative --test tokenizer_formats
echo "wasm tests: ok"
