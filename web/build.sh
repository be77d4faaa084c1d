#!/usr/bin/env bash
# Builds pteron's WebAssembly module for the JavaScript package: the C API (crates/pteron-c,
# with its speech helpers, without the LLM generator) for wasm32-unknown-unknown with SIMD128, fat LTO and stripped
# (the `wheel` profile), into web/dist/pteron_c.wasm; prints its size and gzipped size.
# Needs the toolchain tools/dev/wasm_tests.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/dev/wasm_env.sh
"${wasm_cargo[@]}" build --profile wheel --locked --target wasm32-unknown-unknown \
  --target-dir target/wasm -p pteron-c --no-default-features --features audio --lib
mkdir -p web/dist
cp target/wasm/wasm32-unknown-unknown/wheel/pteron_c.wasm web/dist/pteron_c.wasm
size=$(stat -c %s web/dist/pteron_c.wasm)
gz=$(gzip -9 -c web/dist/pteron_c.wasm | wc -c)
echo "web/dist/pteron_c.wasm: $size bytes, $gz gzipped"
