#!/usr/bin/env bash
# The test suite on aarch64 Linux, under QEMU user mode (facts: ../shared/docs/targets.md).
# Debian's rustc-web (1.96) builds for aarch64 with the multiarch arm64 std (rustup's toolchain
# has no aarch64 std here); tests run in release mode through `qemu-aarch64`, on a CPU model
# with every optional feature (`max`: dotprod, i8mm, fp16, bf16, SVE) and on one with none
# (`cortex-a72`: NEON only), so that kernels chosen by runtime detection take both paths, and
# the kernels once more on `neoverse-n1` (dotprod without i8mm: the `sdot` int8 path).
#
# pteron-cli's tests start the `pteron` binary as a child process, which QEMU user mode cannot
# run by itself without binfmt_misc: they start it through PTERON_TEST_RUNNER (qemu-aarch64).
# Not run under emulation: the Python package (x86-64 only here).
# Usage: tools/dev/aarch64_tests.sh            (installs the Debian packages when missing)
set -euo pipefail
cd "$(dirname "$0")/../.."

source tools/dev/apt_install.sh
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  if [ "$(id -u)" != 0 ]; then sudo dpkg --add-architecture arm64; else dpkg --add-architecture arm64; fi
fi
apt_install rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu \
  libc6-dev-arm64-cross qemu-user

export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="timeout 1200 qemu-aarch64"
export PTERON_TEST_RUNNER=qemu-aarch64
# No debug info in these release builds: links sooner, and the tests need none.
export CARGO_PROFILE_RELEASE_DEBUG=false
# Every run selects the same packages, so all of them reuse the one build (another selection
# unifies other features and compiles the workspace again).
cargo=(/usr/bin/cargo test --release --locked --target aarch64-unknown-linux-gnu
  --target-dir target/aarch64 --workspace --exclude pteron-py --exclude pteron-gpu
  --exclude pteron-cli)
# The GPU engine (and the CLI, which links it: wgpu's release build would cost CI minutes) are
# left out: there is no arm64 Vulkan driver here, and the CLI is a thin layer over the
# libraries whose suites run below.
/usr/bin/cargo --version
"${cargo[@]}" --no-run

# Emulation runs the code ~30x slower than the host: two tests that only repeat, at more draft
# lengths, prompts and threads, what the speculative suite's other tests check on this
# architecture (the checking call's rows, acceptance, stops) run natively only.
echo "aarch64: the whole suite, QEMU -cpu max"
QEMU_CPU=max "${cargo[@]}" -- --skip greedy_tokens_equal_plain_decoding_and_executorch \
  --skip stops_inside_accepted_runs_end_where_plain_decoding_does

echo "aarch64: unit tests, op conformance and fixtures, QEMU -cpu cortex-a72"
QEMU_CPU=cortex-a72 "${cargo[@]}" --lib --test ops_cpu --test golden --test xnnpack \
  --test gemm --test conv --test dwconv --test rows
echo "aarch64: kernels, QEMU -cpu neoverse-n1"
QEMU_CPU=neoverse-n1 "${cargo[@]}" --lib --test gemm --test conv --test dwconv --test rows
echo "aarch64 tests: ok"
