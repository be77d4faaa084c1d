// ExecuTorch's Cortex-M backend operators (over Arm's CMSIS-NN) for the seven operators of
// DS-CNN int8 by the Cortex-M backend (its Cortex-M4 form), for run_probe.cpp.
#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/kernel/operator_registry.h>

#include <optional>

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Kernel;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::Span;
using Int64ArrayRef = executorch::aten::ArrayRef<int64_t>;

namespace cortex_m::native {
Tensor& dequantize_per_tensor_out(KernelRuntimeContext&, const Tensor&, double, int64_t,
    int64_t, int64_t, ScalarType, Tensor&);
Tensor& quantize_per_tensor_out(KernelRuntimeContext&, const Tensor&, double, int64_t, int64_t,
    int64_t, ScalarType, Tensor&);
Tensor& pad_out(KernelRuntimeContext&, const Tensor&, const Int64ArrayRef, const Int64ArrayRef,
    int64_t, Tensor&);
Tensor& quantized_avg_pool2d_out(KernelRuntimeContext&, const Tensor&, const Int64ArrayRef,
    const Int64ArrayRef, const Int64ArrayRef, const bool, const int64_t, const int64_t,
    const int64_t, const Tensor&, Tensor&);
Tensor& quantized_conv2d_out(KernelRuntimeContext&, const Tensor&, const Tensor&,
    const std::optional<Tensor>&, const Int64ArrayRef, const Int64ArrayRef, const Int64ArrayRef,
    const int64_t, const int64_t, const Tensor&, const Tensor&, const int64_t, const int64_t,
    const Tensor&, Tensor&);
Tensor& quantized_depthwise_conv2d_out(KernelRuntimeContext&, const Tensor&, const Tensor&,
    const std::optional<Tensor>&, const Int64ArrayRef, const Int64ArrayRef, const Int64ArrayRef,
    const int64_t, const int64_t, const int64_t, const Tensor&, const Tensor&, const int64_t,
    const int64_t, const Tensor&, Tensor&);
Tensor& quantized_linear_out(KernelRuntimeContext&, const Tensor&, const Tensor&,
    const std::optional<Tensor>&, const std::optional<Tensor>&, const int64_t, const int64_t,
    const int64_t, const Int64ArrayRef, const Int64ArrayRef, const int64_t, const int64_t,
    Tensor&);
} // namespace cortex_m::native

namespace cm = cortex_m::native;

static constexpr const char dq[] = "cortex_m::dequantize_per_tensor.out";
static constexpr const char q[] = "cortex_m::quantize_per_tensor.out";
static constexpr const char pad[] = "cortex_m::pad.out";
static constexpr const char pool[] = "cortex_m::quantized_avg_pool2d.out";
static constexpr const char conv[] = "cortex_m::quantized_conv2d.out";
static constexpr const char dw[] = "cortex_m::quantized_depthwise_conv2d.out";
static constexpr const char linear[] = "cortex_m::quantized_linear.out";

static const Kernel kernels[] = {
    executorch::extension::make_boxed_kernel(dq, EXECUTORCH_FN(cm::dequantize_per_tensor_out, dq)),
    executorch::extension::make_boxed_kernel(q, EXECUTORCH_FN(cm::quantize_per_tensor_out, q)),
    executorch::extension::make_boxed_kernel(pad, EXECUTORCH_FN(cm::pad_out, pad)),
    executorch::extension::make_boxed_kernel(pool, EXECUTORCH_FN(cm::quantized_avg_pool2d_out, pool)),
    executorch::extension::make_boxed_kernel(conv, EXECUTORCH_FN(cm::quantized_conv2d_out, conv)),
    executorch::extension::make_boxed_kernel(
        dw, EXECUTORCH_FN(cm::quantized_depthwise_conv2d_out, dw)),
    executorch::extension::make_boxed_kernel(linear, EXECUTORCH_FN(cm::quantized_linear_out, linear)),
};

Span<const Kernel> probe_kernels() {
  return {kernels, sizeof(kernels) / sizeof(kernels[0])};
}

const char* probe_program() {
  return "ds_cnn_cm4 (Cortex-M backend, M4 form, CMSIS-NN)";
}

float probe_tolerance() {
  return 0.0f;
}
