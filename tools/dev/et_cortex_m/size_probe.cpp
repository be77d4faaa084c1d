// ExecuTorch's runtime alone on bare-metal Cortex-M, the counterpart of pteron's
// examples/cortex-m/src/bin/size_test.rs (built by tools/dev/cortex_m_et.sh): parse the
// embedded program, load its `forward` method with no kernels registered, and exit with
// status 0 when the load stops for exactly that reason (a missing operator). Planned memory
// and the method's metadata come from static pools through ExecuTorch's MemoryManager.
#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include <stdlib.h>

using executorch::extension::BufferDataLoader;
using executorch::runtime::Error;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Program;
using executorch::runtime::Span;

// The program, placed by program.S (.incbin) in its own section, not counted as code.
extern "C" const unsigned char pte_start[];
extern "C" const unsigned char pte_end[];

alignas(16) static unsigned char method_pool[64 * 1024];
alignas(16) static unsigned char planned_pool[256 * 1024];

int main() {
  executorch::runtime::runtime_init();
  BufferDataLoader loader(pte_start, static_cast<size_t>(pte_end - pte_start));
  auto program = Program::load(&loader);
  if (!program.ok()) {
    exit(2);
  }
  auto meta = program->method_meta("forward");
  if (!meta.ok()) {
    exit(3);
  }
  // Planned buffers carved from the static pool, one span each.
  static Span<uint8_t> spans[8];
  size_t n = meta->num_memory_planned_buffers();
  size_t used = 0;
  if (n > 8) {
    exit(4);
  }
  for (size_t i = 0; i < n; i++) {
    size_t size = static_cast<size_t>(meta->memory_planned_buffer_size(i).get());
    if (used + size > sizeof(planned_pool)) {
      exit(5);
    }
    spans[i] = Span<uint8_t>(planned_pool + used, size);
    used += (size + 15) & ~size_t{15};
  }
  MemoryAllocator method_allocator(sizeof(method_pool), method_pool);
  HierarchicalAllocator planned({spans, n});
  MemoryManager memory(&method_allocator, &planned);
  auto method = program->load_method("forward", &memory);
  exit(method.error() == Error::OperatorMissing ? 0 : 1);
}
