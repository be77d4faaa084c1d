#!/usr/bin/env bash
# Microcontrollers (facts: ../shared/docs/targets.md): pteron's no_std crates on bare-metal
# Cortex-M under QEMU, and on the host without `std`.
#
# 1. Host: pteron-format, pteron-core, pteron-kernels and pteron-kernels-mcu build with
#    `--no-default-features` (core + alloc, pteron-core without its `plan` stages), and the
#    MLPerf Tiny fixtures (testdata/mcu) run through them.
# 2. The firmware of examples/cortex-m (every fixture embedded, only their kernels linked)
#    built with Debian's rustc-web + build-std, run on Cortex-M4F (QEMU mps2-an386) and
#    Cortex-M55 (mps3-an547): it compares each output with ExecuTorch's golden and exits
#    non-zero on any difference. It prints instruction counts (-icount) and heap figures.
# 3. Sizes (arm-none-eabi-size; opt-level "z", LTO, panic=abort): the runtime alone
#    (`size_test`: load + execute, no kernels) and a keyword-spotting firmware (DS-CNN int8).
# Usage: tools/dev/cortex_m_tests.sh   (installs the Debian packages when missing)
set -euo pipefail
cd "$(dirname "$0")/../.."

echo "no_std on the host: build and the MLPerf Tiny fixtures"
cargo build --locked -p pteron-format -p pteron-core -p pteron-kernels -p pteron-kernels-mcu --no-default-features
cargo test --locked -p pteron-kernels-mcu --no-default-features --test fixtures
# pteron-core without its planning stages (as firmware builds it), with std for the test harness.
cargo test --locked -p pteron-core --no-default-features --features std --lib

source tools/dev/apt_install.sh
apt_install rustc-web cargo-web rust-web-src lld-19 gcc-arm-none-eabi binutils-arm-none-eabi
if ! dpkg -s qemu-system-arm >/dev/null 2>&1; then
  # Debian 12's qemu-system-arm (7.2) replaces a backported qemu-utils where the image has one;
  # nothing else may go.
  sudo=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
  $sudo apt-get update -qq
  removed=$($sudo apt-get install -s --no-install-recommends qemu-system-arm | awk '/^Remv/ {print $2}')
  if [ -n "$removed" ] && [ "$removed" != "qemu-utils" ]; then
    echo "installing qemu-system-arm would remove: $removed" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends qemu-system-arm >/dev/null
fi

export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1
build() { # TARGET [cargo args...]
  local target=$1
  shift
  (cd examples/cortex-m && /usr/bin/cargo build --release --target "$target" \
    -Zbuild-std=core,alloc,compiler_builtins -Zbuild-std-features=compiler-builtins-mem \
    --locked --target-dir ../../target/cortex-m "$@")
}
qemu() { # MACHINE CPU ELF
  timeout 900 qemu-system-arm -M "$1" -cpu "$2" -display none -serial null -monitor none \
    -semihosting-config enable=on,target=native -icount shift=0 -kernel "$3" </dev/null
}
/usr/bin/cargo --version

for board in "thumbv7em-none-eabihf mps2-an386 cortex-m4" "thumbv8m.main-none-eabihf mps3-an547 cortex-m55"; do
  read -r target machine cpu <<<"$board"
  out=target/cortex-m/$target/release
  echo "Cortex-M: $cpu ($machine): every fixture"
  build "$target" --bins
  qemu "$machine" "$cpu" "$out/pteron-cortex-m"
  echo "Cortex-M: $cpu: the single-operator cases (testdata/mcu_ops)"
  PTERON_MCU_FIXTURES="$(pwd)/testdata/mcu_ops" build "$target" --bin pteron-cortex-m
  qemu "$machine" "$cpu" "$out/pteron-cortex-m"
  echo "Cortex-M: $cpu: the runtime alone (size_test: load + execute, no kernels)"
  qemu "$machine" "$cpu" "$out/size_test"
  arm-none-eabi-size -A "$out/size_test" | grep -E '^\.(vector_table|text|rodata|data|bss|heap) '
  echo "Cortex-M: $cpu: keyword-spotting firmware (DS-CNN int8 by the Cortex-M backend, its kernels only)"
  PTERON_MCU_ONLY=ds_cnn_cm build "$target" --bin pteron-cortex-m
  qemu "$machine" "$cpu" "$out/pteron-cortex-m"
  arm-none-eabi-size -A "$out/pteron-cortex-m" | grep -E '^\.(vector_table|text|rodata|data|bss|heap|models) '
done
echo "Cortex-M: cortex-m4: the runtime alone with the size flags of nightly Rust (immediate-abort"
echo "panics, no Debug formatting or panic locations, core built with optimize_for_size)"
(cd examples/cortex-m && CARGO_TARGET_THUMBV7EM_NONE_EABIHF_RUSTFLAGS="-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none -Zfmt-debug=none" \
  /usr/bin/cargo build --release --target thumbv7em-none-eabihf --locked --bin size_test \
  -Zbuild-std=core,alloc,compiler_builtins -Zbuild-std-features=compiler-builtins-mem,optimize_for_size \
  --target-dir ../../target/cortex-m-size)
qemu mps2-an386 cortex-m4 target/cortex-m-size/thumbv7em-none-eabihf/release/size_test
arm-none-eabi-size -A target/cortex-m-size/thumbv7em-none-eabihf/release/size_test | grep -E '^\.(vector_table|text|rodata|data|bss) '
echo "Cortex-M tests: ok"
