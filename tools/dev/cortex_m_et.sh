#!/usr/bin/env bash
# ExecuTorch's own runtime on bare-metal Cortex-M4F under QEMU (mps2-an386), beside pteron's
# firmware (examples/cortex-m). ExecuTorch's core and executor sources are built with Debian's
# arm-none-eabi-g++ as its size test builds them (Release: -Os, no exceptions or RTTI,
# logging off, minimal platform layer), sections per function and unused ones dropped.
# 1. The runtime alone: tools/dev/et_cortex_m/size_probe.cpp loads the same DS-CNN program
#    as pteron's size_test with no kernels and must stop at the missing operator;
#    arm-none-eabi-size counts vector table + text + rodata + data (the program not included),
#    linked with newlib-nano and with the full newlib.
# 2. The program run: run_probe.cpp registers ExecuTorch's portable kernels for the six
#    operators DS-CNN fp32 calls, runs it, checks ExecuTorch's golden and prints instructions
#    per load and execute (SysTick under -icount, as pteron's firmware counts them).
# Not part of CI: it needs ExecuTorch's and FlatBuffers' sources.
#
# Usage: ET_SRC=<executorch checkout> FLATBUFFERS_SRC=<flatbuffers v24.3.25 checkout> \
#          [CMSIS_NN_SRC=<CMSIS-NN checkout>] tools/dev/cortex_m_et.sh
# (FlatBuffers' headers must match the flatc of the exporter venv, 24.3.25; flatc is taken
# from that venv: FLATC=/opt/etvenv/lib/python3.11/site-packages/executorch/data/bin/flatc.)
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${ET_SRC:?set ET_SRC to an ExecuTorch source tree}"
: "${FLATBUFFERS_SRC:?set FLATBUFFERS_SRC to a FlatBuffers v24.3.25 source tree}"
FLATC=${FLATC:-/opt/etvenv/lib/python3.11/site-packages/executorch/data/bin/flatc}
FIXTURE=${FIXTURE:-testdata/mcu/ds_cnn_fp32}
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
arm-none-eabi-gcc "${cpu[@]}" -DPTE_PATH="\"$(pwd)/$FIXTURE/model.pte\"" \
  -DINPUT_PATH="\"$(pwd)/$FIXTURE/input0.bin\"" -DEXPECTED_PATH="\"$(pwd)/$FIXTURE/expected0.bin\"" \
  -c tools/dev/et_cortex_m/program.S -o "$out/obj/program.o"
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

# The same runtime running programs: ExecuTorch's portable kernels for the six operators of
# DS-CNN fp32 (kernels_portable.cpp), and its Cortex-M backend operators over Arm's CMSIS-NN
# for DS-CNN int8 by that backend (kernels_cortex_m.cpp; needs CMSIS_NN_SRC, a CMSIS-NN
# checkout; skipped without it). run_probe.cpp runs each, checks the golden and prints
# instructions per load and execute.
run() { # NAME FIXTURE OBJECTS...
  local name=$1 fixture=$2
  shift 2
  arm-none-eabi-gcc "${cpu[@]}" -DPTE_PATH="\"$(pwd)/$fixture/model.pte\"" \
    -DINPUT_PATH="\"$(pwd)/$fixture/input0.bin\"" -DEXPECTED_PATH="\"$(pwd)/$fixture/expected0.bin\"" \
    -c tools/dev/et_cortex_m/program.S -o "$out/obj/program_$name.o"
  arm-none-eabi-g++ "${cpu[@]}" -Os --specs=nano.specs --specs=rdimon.specs -u _printf_float \
    -Wl,--gc-sections -T tools/dev/et_cortex_m/link.ld -o "$out/run_$name" "$out/obj/startup.o" \
    "$out/obj/run_probe.o" "$out/obj/program_$name.o" "$@" "${objs[@]}"
  timeout 900 qemu-system-arm -M mps2-an386 -cpu cortex-m4 -display none -serial null \
    -monitor none -semihosting-config enable=on,target=native -icount shift=0 \
    -kernel "$out/run_$name" </dev/null
}
cc() { # SOURCE OBJECT [flags...]
  local src=$1 obj=$2
  shift 2
  arm-none-eabi-g++ -std=c++17 "${flags[@]}" "$@" -c "$src" -o "$obj"
}
cc tools/dev/et_cortex_m/run_probe.cpp "$out/obj/run_probe.o"
pobjs=()
for k in op_convolution op_native_batch_norm op_addmm op_avg_pool2d op_permute_copy op_relu \
  util/kernel_ops_util util/copy_ops_util util/activation_ops_util util/matmul_ops_util \
  util/normalization_ops_util util/broadcast_util util/dtype_util util/delinearize_index \
  util/repeat_util util/reduce_util; do
  o="$out/obj/kernels_$(echo "$k" | tr / _).o"
  cc "$ET_SRC/kernels/portable/cpu/$k.cpp" "$o"
  pobjs+=("$o")
done
cc tools/dev/et_cortex_m/kernels_portable.cpp "$out/obj/kernels_portable.o"
run portable testdata/mcu/ds_cnn_fp32 "$out/obj/kernels_portable.o" "${pobjs[@]}"

if [ -n "${CMSIS_NN_SRC:-}" ]; then
  cobjs=()
  # The integer kernels only: the float ones need CMSIS-DSP's types.
  for c in $(find "$CMSIS_NN_SRC/Source" -name '*.c' ! -name '*_f16.c' ! -name '*_f32.c' | sort); do
    o="$out/obj/cmsis_$(basename "$c" .c).o"
    arm-none-eabi-gcc "${cpu[@]}" -Os -ffunction-sections -fdata-sections -I"$CMSIS_NN_SRC/Include" \
      -c "$c" -o "$o"
    cobjs+=("$o")
  done
  for op in op_dequantize_per_tensor op_quantize_per_tensor op_pad op_quantized_avg_pool2d \
    op_quantized_conv2d op_quantized_depthwise_conv2d op_quantized_linear; do
    o="$out/obj/cm_$op.o"
    cc "$ET_SRC/backends/cortex_m/ops/$op.cpp" "$o" -I"$CMSIS_NN_SRC/Include"
    cobjs+=("$o")
  done
  cc tools/dev/et_cortex_m/kernels_cortex_m.cpp "$out/obj/kernels_cortex_m.o"
  run cortex_m testdata/mcu/ds_cnn_cm4 "$out/obj/kernels_cortex_m.o" "${cobjs[@]}" "${pobjs[@]}"
fi
