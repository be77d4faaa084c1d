// ExecuTorch's runtime with its portable kernels running DS-CNN fp32 on bare-metal Cortex-M4F
// under QEMU, beside pteron's firmware (examples/cortex-m): the program, its input and
// ExecuTorch's own golden embedded (program.S), the six operators the program calls
// registered from ExecuTorch's portable kernel sources, planned memory and metadata from
// static pools. Prints instructions for load and execute (SysTick under `-icount shift=0`,
// calibrated against a loop of known length, as the pteron firmware counts) and exits with
// status 0 when the output matches the golden within 1e-5 of its largest magnitude.
#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using executorch::aten::IntArrayRef;
using executorch::aten::Scalar;
using executorch::aten::Tensor;
using executorch::extension::BufferDataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::Kernel;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Program;
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

extern "C" const unsigned char pte_start[], pte_end[];
extern "C" const unsigned char input_start[], input_end[];
extern "C" const unsigned char expected_start[], expected_end[];

alignas(16) static unsigned char method_pool[256 * 1024];
alignas(16) static unsigned char planned_pool[1024 * 1024];

// SysTick: 24-bit down-counter; wraps are counted by its interrupt (startup.c).
extern "C" volatile unsigned systick_wraps;
static unsigned long long ticks() {
  volatile unsigned* cvr = (volatile unsigned*)0xE000E018;
  unsigned w, v;
  do {
    w = systick_wraps;
    v = *cvr;
  } while (w != systick_wraps);
  return (unsigned long long)w * 0x1000000ull + (0xFFFFFFu - v);
}

int main() {
  volatile unsigned* syst = (volatile unsigned*)0xE000E010;
  syst[1] = 0xFFFFFF; // reload
  syst[2] = 0;        // current
  syst[0] = 7;        // enable, interrupt, processor clock
  // The counter reads 0 until its first reload.
  while (syst[2] == 0) {
  }
  // Calibration: a two-instruction loop run n times.
  unsigned n = 1000000;
  unsigned long long t = ticks();
  __asm volatile("1: subs %0, %0, #1\n bne 1b" : "+r"(n));
  double per_tick = 2.0e6 / (double)(ticks() - t);
  printf("SysTick: %g instructions per tick\n", per_tick);

  executorch::runtime::runtime_init();
  if (executorch::runtime::register_kernels({kernels, sizeof(kernels) / sizeof(kernels[0])}) !=
      Error::Ok) {
    exit(2);
  }
  unsigned long long t0 = ticks();
  BufferDataLoader loader(pte_start, static_cast<size_t>(pte_end - pte_start));
  auto program = Program::load(&loader);
  if (!program.ok()) {
    exit(3);
  }
  auto meta = program->method_meta("forward");
  static Span<uint8_t> spans[8];
  size_t nbuf = meta->num_memory_planned_buffers();
  size_t used = 0;
  for (size_t i = 0; i < nbuf && i < 8; i++) {
    size_t size = static_cast<size_t>(meta->memory_planned_buffer_size(i).get());
    if (used + size > sizeof(planned_pool)) {
      exit(4);
    }
    spans[i] = Span<uint8_t>(planned_pool + used, size);
    used += (size + 15) & ~size_t{15};
  }
  MemoryAllocator method_allocator(sizeof(method_pool), method_pool);
  HierarchicalAllocator planned({spans, nbuf});
  MemoryManager memory(&method_allocator, &planned);
  auto method = program->load_method("forward", &memory);
  if (!method.ok()) {
    printf("load: error %d\n", (int)method.error());
    exit(5);
  }
  unsigned long long t1 = ticks();
  // The input: the planned input tensor's bytes are overwritten in place.
  Tensor in = method->mutable_input(0).toTensor();
  if (in.nbytes() != static_cast<size_t>(input_end - input_start)) {
    exit(6);
  }
  memcpy(in.mutable_data_ptr<float>(), input_start, in.nbytes());
  unsigned long long t2 = ticks();
  if (method->execute() != Error::Ok) {
    exit(7);
  }
  unsigned long long t3 = ticks();
  const Tensor out = method->get_output(0).toTensor();
  const float* got = out.const_data_ptr<float>();
  size_t count = static_cast<size_t>(expected_end - expected_start) / 4;
  if (out.numel() != (ssize_t)count) {
    exit(8);
  }
  float max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < count; i++) {
    float want;
    memcpy(&want, expected_start + 4 * i, 4);
    max_diff = fmaxf(max_diff, fabsf(got[i] - want));
    max_ref = fmaxf(max_ref, fabsf(want));
  }
  printf("ExecuTorch: ds_cnn_fp32: max|diff| %g (relative %g); load %.2f M instructions, "
         "execute %.2f M; method pool %u B used, planned %u B\n",
         (double)max_diff, (double)(max_diff / max_ref), (double)(t1 - t0) * per_tick / 1e6,
         (double)(t3 - t2) * per_tick / 1e6, (unsigned)method_allocator.used_size(),
         (unsigned)used);
  exit(max_diff <= 1e-5f * max_ref ? 0 : 1);
}
