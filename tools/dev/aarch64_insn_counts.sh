#!/usr/bin/env bash
# Instructions executed per inference under QEMU user mode, for each aarch64 kernel path:
# the deterministic proxy for speed until an ARM machine is measured. Counts come from the
# TCG plugin in tools/qemu-insn-count (every executed block's instructions), as the
# difference between a run of 1 + N inferences and one of 1 (load, packing and the first
# run cancel out), divided by N; decode steps likewise from 8 + N and 8 generated tokens.
#
# Paths: `--simd portable` (no SIMD kernels), then NEON with the int8 products chosen by the
# CPU model: cortex-a72 (NEON only: widening multiplies), neoverse-n1 (+ sdot),
# max (+ i8mm: sudot). One thread.
#
# Where tools/dev/aarch64_et_build.sh has built ExecuTorch's own aarch64 runtime (its wheel's
# libraries, XNNPACK delegate), a second table puts its counts on the same files beside
# pteron's NEON paths, on each CPU model (XNNPACK picks its kernels from the same hwcaps).
# The CLI is built without its GPU engine (no arm64 Vulkan driver here, and wgpu costs build time).
# Needs the toolchain tools/dev/aarch64_tests.sh installs. Usage: tools/dev/aarch64_insn_counts.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-3}

export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
/usr/bin/cargo build -q --release --locked --target aarch64-unknown-linux-gnu \
  --target-dir target/aarch64 -p pteron-cli --no-default-features
(cd tools/qemu-insn-count && cargo build -q --release)
plugin=tools/qemu-insn-count/target/release/libqemu_insn_count.so
bin=target/aarch64/aarch64-unknown-linux-gnu/release/pteron

et=target/et-aarch64/et_runner

# insns CPU ARGS...: the instructions of one run of `pteron ARGS...` on QEMU CPU model CPU
# (with PROGRAM set, of that program instead of pteron).
insns() {
  local cpu=$1
  shift
  QEMU_CPU=$cpu timeout 3000 qemu-aarch64 -d plugin -plugin "$plugin" "${PROGRAM:-$bin}" "$@" \
    2>&1 >/dev/null | sed -n 's/^insns: //p'
}

# per CPU SIMD MODEL: instructions per inference of MODEL's forward.
per_run() {
  local cpu=$1 simd=$2 model=$3 a b
  a=$(insns "$cpu" --simd "$simd" run "$model" --threads 1 --repeat 1)
  b=$(insns "$cpu" --simd "$simd" run "$model" --threads 1 --repeat $((1 + n)))
  echo $(((b - a) / n))
}

# per_run_et CPU MODEL: the same for ExecuTorch's runtime (et_runner MODEL REPEAT 1 runs
# 1 + REPEAT times on one thread).
# Its inputs must be set: the `input0.npy` beside the file.
per_run_et() {
  local cpu=$1 model=$2 a b input
  input=$(dirname "$model")/input0.npy
  a=$(PROGRAM=$et insns "$cpu" "$model" 0 1 "$input")
  b=$(PROGRAM=$et insns "$cpu" "$model" "$n" 1 "$input")
  echo $(((b - a) / n))
}

# per_token CPU SIMD MODEL TOKENIZER: instructions per decode step.
per_token() {
  local cpu=$1 simd=$2 model=$3 tok=$4 a b
  local args=(generate "$model" --tokenizer "$tok" --prompt "Once upon a time" --ignore-eos --threads 1)
  a=$(insns "$cpu" --simd "$simd" "${args[@]}" --max-new-tokens 8)
  b=$(insns "$cpu" --simd "$simd" "${args[@]}" --max-new-tokens $((8 + n)))
  echo $(((b - a) / n))
}

row() {
  local name=$1 kind=$2
  shift 2
  local p a72 n1 max
  p=$("$kind" max portable "$@")
  a72=$("$kind" cortex-a72 neon "$@")
  n1=$("$kind" neoverse-n1 neon "$@")
  max=$("$kind" max neon "$@")
  awk -v name="$name" -v p="$p" -v a="$a72" -v n="$n1" -v m="$max" 'BEGIN {
    printf "| %s | %.1f M | %.1f M (%.2fx) | %.1f M (%.2fx) | %.1f M (%.2fx) |\n",
      name, p / 1e6, a / 1e6, p / a, n / 1e6, p / n, m / 1e6, p / m }'
}

echo "| per inference / step | portable | NEON (cortex-a72) | + sdot (neoverse-n1) | + i8mm (max) |"
echo "|---|---|---|---|---|"
models=(
  "MobileNetV2 small, XNNPACK fp32:testdata/xnnpack/mobilenet_v2_small/model.pte"
  "MobileNetV2 small, XNNPACK int8:testdata/xnnpack/mobilenet_v2_small_int8/model.pte"
)
# Full-size files, where tools/export wrote them: bench/bench.py (its export of mobilenet_v2),
# tools/export/int8_repro.py mobilenet_v2, and
# tools/export/export_xnnpack.py --full --only decode_layer_8da4w --out tools/export/out/xnnpack_full
for extra in "MobileNetV2, XNNPACK fp32:tools/export/out/mobilenet_v2/model_xnnpack.pte" \
  "MobileNetV2, XNNPACK int8 (static):tools/export/out/int8_static/mobilenet_v2/model.pte" \
  "SmolLM2-135M layer's linears, one token, XNNPACK 8da4w:tools/export/out/xnnpack_full/decode_layer_8da4w/model.pte"; do
  [ -f "${extra#*:}" ] && models+=("$extra")
done
for m in "${models[@]}"; do
  row "${m%%:*}" per_run "${m#*:}"
done
row "tiny LLM 8da4w, decode step" per_token testdata/llm/tiny_xnnpack/8da4w.pte \
  testdata/llm/tiny/tokenizer.json

[ -x "$et" ] || exit 0
echo
# The last column: ExecuTorch's output on this CPU model against the golden beside the file
# (ExecuTorch's x86-64 output), where there is one: a count is only comparable where it is right.
echo "| per inference, same file | CPU model | pteron (NEON) | ExecuTorch (XNNPACK) | ExecuTorch / pteron | ExecuTorch's output vs golden |"
echo "|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  model=${m#*:}
  dir=$(dirname "$model")
  for cpu in cortex-a72 neoverse-n1 max; do
    p=$(per_run "$cpu" neon "$model")
    e=$(per_run_et "$cpu" "$model")
    check="-"
    if [ -f "$dir/input0.npy" ] && [ -f "$dir/expected0.npy" ]; then
      check=$(QEMU_CPU=$cpu timeout 3000 qemu-aarch64 "$et" "$model" 0 1 "$dir/input0.npy" \
        --expect "$dir/expected0.npy" 2>/dev/null | sed -n 's/^max|diff| \([^ ]*\).*/max abs diff \1/p')
    fi
    awk -v name="${m%%:*}" -v cpu="$cpu" -v p="$p" -v e="$e" -v c="$check" 'BEGIN {
      printf "| %s | %s | %.1f M | %.1f M | %.2fx | %s |\n", name, cpu, p / 1e6, e / 1e6, e / p, c }'
  done
done
