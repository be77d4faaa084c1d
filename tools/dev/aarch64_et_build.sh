#!/usr/bin/env bash
# ExecuTorch's own aarch64 runtime, for instruction counts beside pteron's under QEMU
# (tools/dev/aarch64_insn_counts.sh): the libraries and headers of its Linux aarch64 wheel
# (the version pinned in tools/export/requirements.txt, from PyPI; no Python runs them) and
# bench/et_runner.cpp (the C++ runner bench/bench.py uses on x86-64) built with Debian's aarch64
# cross compiler against them. Everything lands in target/et-aarch64 (not committed).
# The wheel's Python bindings are not used: they link the aarch64 torch wheel, which on PyPI
# is built for CUDA. Needs the packages tools/dev/aarch64_tests.sh installs, and pip.
# Usage: tools/dev/aarch64_et_build.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

source tools/dev/apt_install.sh
apt_install g++-aarch64-linux-gnu libstdc++6:arm64 unzip

out=target/et-aarch64
version=$(sed -n 's/^executorch==//p' tools/export/requirements.txt)
mkdir -p "$out"
if [ ! -f "$out/lib/libexecutorch.so" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 \
    --python-version 3.11 --implementation cp --abi cp311 -d "$out" "executorch==$version"
  wheel=$(ls "$out"/executorch-"$version"-*aarch64.whl)
  rm -rf "$out/lib" "$out/include"
  unzip -q -o "$wheel" 'executorch/lib/*' 'executorch/include/*' -d "$out/wheel"
  mv "$out/wheel/executorch/lib" "$out/wheel/executorch/include" "$out/"
  rm -rf "$out/wheel" "$wheel"
fi
aarch64-linux-gnu-g++ -O2 -std=c++17 -Wno-deprecated-declarations -o "$out/et_runner" \
  bench/et_runner.cpp -I"$out/include" -I"$out/include/executorch/runtime/core/portable_type/c10" \
  -DC10_USING_CUSTOM_GENERATED_MACROS -DET_EVENT_TRACER_ENABLED \
  -L"$out/lib" -Wl,--no-as-needed -lexecutorch -lexecutorch_backend_xnnpack \
  -lexecutorch_threadpool -lexecutorch_kernels_optimized -Wl,-rpath,'$ORIGIN/lib'
echo "built $out/et_runner (ExecuTorch $version)"
