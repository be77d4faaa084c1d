// ExecuTorch's runtime running a DS-CNN program on bare-metal Cortex-M4F under QEMU, beside
// pteron's firmware (examples/cortex-m): the program, its input and the golden embedded
// (program.S), the operators it calls registered from ExecuTorch's kernel sources (see
// probe_kernels), planned memory and metadata from static pools. Prints instructions for
// load and execute (SysTick under `-icount shift=0`, calibrated against a loop of known
// length, as the pteron firmware counts) and exits with status 0 when the output matches
// the golden.
#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

// The kernels this probe registers and how the output is judged: kernels_portable.cpp
// (fp32 programs, within 1e-5 of the golden's largest magnitude) or kernels_cortex_m.cpp
// (int8 programs of the Cortex-M backend over CMSIS-NN, bit-exact).
Span<const Kernel> probe_kernels();
const char* probe_program();
float probe_tolerance();

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
  if (executorch::runtime::register_kernels(probe_kernels()) != Error::Ok) {
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
  Error status = method->execute();
  if (status != Error::Ok) {
    printf("execute: error %d\n", (int)status);
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
  printf("ExecuTorch: %s: max|diff| %g (relative %g); load %.2f M instructions, "
         "execute %.2f M; method pool %u B used, planned %u B\n",
         probe_program(), (double)max_diff, (double)(max_diff / max_ref), (double)(t1 - t0) * per_tick / 1e6,
         (double)(t3 - t2) * per_tick / 1e6, (unsigned)method_allocator.used_size(),
         (unsigned)used);
  exit(max_diff <= probe_tolerance() * max_ref ? 0 : 1);
}
