# Sourced by the wasm scripts: Debian's rustc-web builds std for wasm32 (build-std) and node
# runs wasm32-wasip1 test binaries through tools/dev/wasi_run.mjs (facts:
# ../shared/docs/targets.md). SIMD128 is on: every engine that runs pteron has it.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 RUST_TEST_THREADS=1
export CARGO_TARGET_WASM32_WASIP1_LINKER=/usr/lib/llvm-19/bin/wasm-ld
export CARGO_TARGET_WASM32_WASIP1_RUNNER="node --no-warnings $root/tools/dev/wasi_run.mjs"
# Debian's wasi-libc is linked by hand (crt1 + -lc); it has no pthreads, which std names:
# --allow-undefined leaves them as imports the runner stubs out.
export CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="-Ctarget-feature=+simd128 -Clink-self-contained=no \
-Clink-arg=-L/usr/lib/wasm32-wasi -Clink-arg=/usr/lib/wasm32-wasi/crt1-command.o \
-Clink-arg=--allow-undefined"
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=/usr/lib/llvm-19/bin/wasm-ld
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-Ctarget-feature=+simd128"
wasm_cargo=(/usr/bin/cargo -Zbuild-std=std,panic_abort)
