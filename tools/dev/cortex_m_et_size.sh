#!/usr/bin/env bash
# ExecuTorch's own runtime alone on bare-metal Cortex-M4F, measured beside pteron's
# (examples/cortex-m size_test): ExecuTorch's core and executor sources built with Debian's
# arm-none-eabi-g++ as its size test builds them (Release: -Os, no exceptions or RTTI,
# logging off, minimal platform layer), sections per function and unused ones dropped, linked
# with tools/dev/et_cortex_m/size_probe.cpp, which loads the same DS-CNN program with no
# kernels. It runs under QEMU (mps2-an386) and must stop at the missing operator; then
# arm-none-eabi-size counts vector table + text + rodata + data, the program not included.
# Not part of CI: it needs ExecuTorch's and FlatBuffers' sources.
#
# Usage: ET_SRC=<executorch checkout> FLATBUFFERS_SRC=<flatbuffers v24.3.25 checkout> \
#          tools/dev/cortex_m_et_size.sh
# (FlatBuffers' headers must match the flatc of the exporter venv, 24.3.25; flatc is taken
# from that venv: FLATC=/opt/etvenv/lib/python3.11/site-packages/executorch/data/bin/flatc.)
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${ET_SRC:?set ET_SRC to an ExecuTorch source tree}"
: "${FLATBUFFERS_SRC:?set FLATBUFFERS_SRC to a FlatBuffers v24.3.25 source tree}"
FLATC=${FLATC:-/opt/etvenv/lib/python3.11/site-packages/executorch/data/bin/flatc}
PTE=${PTE:-testdata/mcu/ds_cnn_fp32/model.pte}
out=target/et-cortex-m
mkdir -p "$out/gen/executorch/schema" "$out/obj"

source tools/dev/apt_install.sh
apt_install gcc-arm-none-eabi binutils-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib qemu-system-arm

# The schema headers ExecuTorch's build generates (flatc --cpp --scoped-enums).
"$FLATC" --cpp --cpp-std c++11 --gen-mutable --scoped-enums -o "$out/gen/executorch/schema" \
  "$ET_SRC/schema/program.fbs" "$ET_SRC/schema/scalar_type.fbs"

cpu=(-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16)
flags=("${cpu[@]}" -Os -ffunction-sections -fdata-sections -fno-exceptions -fno-rtti
  -DET_LOG_ENABLED=0 -DET_HAVE_PREAD=0 -DC10_USING_CUSTOM_GENERATED_MACROS
  -I"$out/inc" -I"$out/gen" -I"$FLATBUFFERS_SRC/include"
  -I"$ET_SRC/runtime/core/portable_type/c10")
# `#include <executorch/...>` finds the sources through a link named executorch, and the
# generated schema headers in gen/executorch/schema.
mkdir -p "$out/inc"
ln -sfn "$(cd "$ET_SRC" && pwd)" "$out/inc/executorch"
sources=(
  runtime/backend/interface.cpp
  runtime/core/evalue.cpp runtime/core/tag.cpp runtime/core/tensor_layout.cpp
  runtime/core/exec_aten/util/tensor_util_portable.cpp
  runtime/core/exec_aten/util/tensor_shape_to_c_string.cpp
  runtime/core/portable_type/tensor_impl.cpp
  runtime/executor/method.cpp runtime/executor/method_meta.cpp runtime/executor/program.cpp
  runtime/executor/program_validation.cpp runtime/executor/pte_data_map.cpp
  runtime/executor/tensor_parser_exec_aten.cpp runtime/executor/tensor_parser_portable.cpp
  runtime/kernel/operator_registry.cpp
  runtime/platform/abort.cpp runtime/platform/log.cpp runtime/platform/platform.cpp
  runtime/platform/profiler.cpp runtime/platform/runtime.cpp runtime/platform/default/minimal.cpp
  schema/extended_header.cpp
)
objs=()
for s in "${sources[@]}"; do
  o="$out/obj/$(echo "$s" | tr / _).o"
  arm-none-eabi-g++ -std=c++17 "${flags[@]}" -c "$ET_SRC/$s" -o "$o"
  objs+=("$o")
done
arm-none-eabi-g++ -std=c++17 "${flags[@]}" -c tools/dev/et_cortex_m/size_probe.cpp -o "$out/obj/probe.o"
arm-none-eabi-gcc "${cpu[@]}" -Os -c tools/dev/et_cortex_m/startup.c -o "$out/obj/startup.o"
arm-none-eabi-gcc "${cpu[@]}" -DPTE_PATH="\"$(pwd)/$PTE\"" -c tools/dev/et_cortex_m/program.S -o "$out/obj/program.o"
# Linked twice: with newlib-nano (the size-conscious C library Arm's bare-metal examples use)
# and with the full newlib. Both run; the first is the figure to compare.
for libc in nano full; do
  specs=(--specs=rdimon.specs)
  if [ "$libc" = nano ]; then specs=(--specs=nano.specs --specs=rdimon.specs); fi
  arm-none-eabi-g++ "${cpu[@]}" -Os "${specs[@]}" -Wl,--gc-sections -T tools/dev/et_cortex_m/link.ld \
    -o "$out/size_probe_$libc" "$out/obj/startup.o" "$out/obj/probe.o" "$out/obj/program.o" "${objs[@]}"
  timeout 300 qemu-system-arm -M mps2-an386 -cpu cortex-m4 -display none -serial null -monitor none \
    -semihosting-config enable=on,target=native -kernel "$out/size_probe_$libc" </dev/null
  echo "ExecuTorch's runtime alone, newlib $libc (Cortex-M4F; the load stopped at the missing operator, as expected):"
  arm-none-eabi-size -A "$out/size_probe_$libc" | grep -E '^\.(vectors|text|ARM.exidx|rodata|data) ' |
    awk '{ print; total += $2 } END { print "flash", total, "B" }'
done
