// ExecuTorch's portable kernels for the six operators of DS-CNN fp32, for run_probe.cpp.
#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/kernel/operator_registry.h>

using executorch::aten::IntArrayRef;
using executorch::aten::Scalar;
using executorch::aten::Tensor;
using executorch::runtime::EValue;
using executorch::runtime::Kernel;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::Span;

namespace torch::executor::native {
Tensor& convolution_out(KernelRuntimeContext&, const Tensor&, const Tensor&,
    const std::optional<Tensor>&, IntArrayRef, IntArrayRef, IntArrayRef, bool, IntArrayRef,
    int64_t, Tensor&);
std::tuple<Tensor&, Tensor&, Tensor&> _native_batch_norm_legit_no_training_out(
    KernelRuntimeContext&, const Tensor&, const std::optional<Tensor>&,
    const std::optional<Tensor>&, const Tensor&, const Tensor&, double, double, Tensor&,
    Tensor&, Tensor&);
Tensor& addmm_out(KernelRuntimeContext&, const Tensor&, const Tensor&, const Tensor&,
    const Scalar&, const Scalar&, Tensor&);
Tensor& avg_pool2d_out(KernelRuntimeContext&, const Tensor&, IntArrayRef, IntArrayRef,
    IntArrayRef, bool, bool, std::optional<int64_t>, Tensor&);
Tensor& permute_copy_out(KernelRuntimeContext&, const Tensor&, IntArrayRef, Tensor&);
Tensor& relu_out(KernelRuntimeContext&, const Tensor&, Tensor&);
} // namespace torch::executor::native

namespace native = torch::executor::native;

// Three outputs: the boxing helper takes one, so this one is unboxed by hand.
static void batch_norm(KernelRuntimeContext& ctx, Span<EValue*> s) {
  native::_native_batch_norm_legit_no_training_out(ctx, s[0]->toTensor(),
      s[1]->toOptional<Tensor>(), s[2]->toOptional<Tensor>(), s[3]->toTensor(),
      s[4]->toTensor(), s[5]->toDouble(), s[6]->toDouble(), s[7]->toTensor(),
      s[8]->toTensor(), s[9]->toTensor());
}

static constexpr const char conv[] = "aten::convolution.out";
static constexpr const char addmm[] = "aten::addmm.out";
static constexpr const char pool[] = "aten::avg_pool2d.out";
static constexpr const char permute[] = "aten::permute_copy.out";
static constexpr const char relu[] = "aten::relu.out";

static const Kernel kernels[] = {
    executorch::extension::make_boxed_kernel(conv, EXECUTORCH_FN(native::convolution_out, conv)),
    Kernel("aten::_native_batch_norm_legit_no_training.out", batch_norm),
    executorch::extension::make_boxed_kernel(addmm, EXECUTORCH_FN(native::addmm_out, addmm)),
    executorch::extension::make_boxed_kernel(pool, EXECUTORCH_FN(native::avg_pool2d_out, pool)),
    executorch::extension::make_boxed_kernel(
        permute, EXECUTORCH_FN(native::permute_copy_out, permute)),
    executorch::extension::make_boxed_kernel(relu, EXECUTORCH_FN(native::relu_out, relu)),
};

Span<const Kernel> probe_kernels() {
  return {kernels, sizeof(kernels) / sizeof(kernels[0])};
}

const char* probe_program() {
  return "ds_cnn_fp32 (portable kernels)";
}

float probe_tolerance() {
  return 1e-5f;
}
