// A minimal C++ runner for ExecuTorch's own runtime (the libraries and headers the executorch
// wheel ships), to measure what the C++ runtime costs in memory and time without Python:
// memory-maps a .pte, loads "forward" with its planned buffers, copies .npy inputs into the
// method's inputs, executes it, and prints load time, median execute time and peak RSS in the
// same words as `pteron run`. Built on demand by bench/bench.py (engine "et-cpp"):
//
//   g++ -O2 -std=c++17 -I$ET/include bench/et_runner.cpp -L$ET/lib -lexecutorch \
//       -DC10_USING_CUSTOM_GENERATED_MACROS -DET_EVENT_TRACER_ENABLED \
//       -I$ET/include/executorch/runtime/core/portable_type/c10 \
//       -Wl,--no-as-needed -lexecutorch_backend_xnnpack -lexecutorch_kernels_optimized \
//       -lexecutorch_threadpool \
//       -Wl,-rpath,$ET/lib -o et_runner
//   et_runner MODEL.pte REPEAT THREADS [input0.npy ...] [--expect expected0.npy]
//
// With --expect, output 0 (float32) is compared with the array and its largest absolute
// difference printed (`max|diff| D over N values`). tools/dev/aarch64_et_build.sh builds the
// same file for aarch64 (instruction counts under QEMU beside pteron's).
//
// THREADS resizes ExecuTorch's threadpool (the XNNPACK backend's threads), as the Python
// bindings' `_unsafe_reset_threadpool` does.
// This file is a benchmark tool; pteron itself contains no C or C++.

#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/executor/memory_manager.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

// The wheel ships the threadpool library but not its header: the two entry points used here.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

using executorch::extension::MmapDataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::Program;
using executorch::runtime::Span;

static long status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t n = strlen(field);
  while (std::getline(f, line)) {
    if (line.compare(0, n, field) == 0) return atol(line.c_str() + n);
  }
  return -1;
}

// The data bytes of a version 1/2/3 .npy file.
static std::vector<char> npy_data(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (b.size() < 10 || memcmp(b.data(), "\x93NUMPY", 6) != 0) {
    fprintf(stderr, "%s: not a .npy file\n", path);
    exit(2);
  }
  size_t hlen, start;
  if (b[6] == 1) {
    hlen = (unsigned char)b[8] | ((unsigned char)b[9] << 8);
    start = 10;
  } else {
    hlen = (unsigned char)b[8] | ((unsigned char)b[9] << 8) | ((unsigned char)b[10] << 16) |
           ((size_t)(unsigned char)b[11] << 24);
    start = 12;
  }
  return std::vector<char>(b.begin() + start + hlen, b.end());
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL.pte REPEAT THREADS [input.npy ...] [--expect out.npy]\n",
            argv[0]);
    return 2;
  }
  executorch::runtime::runtime_init();
  executorch::extension::threadpool::get_threadpool()->_unsafe_reset_threadpool(
      (uint32_t)atoi(argv[3]));
  auto t0 = std::chrono::steady_clock::now();
  auto loader = MmapDataLoader::from(argv[1]);
  if (!loader.ok()) {
    fprintf(stderr, "cannot map %s\n", argv[1]);
    return 1;
  }
  auto program = Program::load(&loader.get());
  if (!program.ok()) {
    fprintf(stderr, "Program::load failed: 0x%x\n", (int)program.error());
    return 1;
  }
  auto meta = program->method_meta("forward");
  if (!meta.ok()) return 1;
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  std::vector<Span<uint8_t>> spans;
  for (size_t i = 0; i < meta->num_memory_planned_buffers(); i++) {
    size_t n = (size_t)meta->memory_planned_buffer_size(i).get();
    buffers.emplace_back(new uint8_t[n]);
    spans.emplace_back(buffers.back().get(), n);
  }
  HierarchicalAllocator planned({spans.data(), spans.size()});
  // Method metadata (values, kernels, delegate handles): a fixed pool, as executor_runner.
  static uint8_t method_pool[8 << 20];
  static uint8_t temp_pool[8 << 20];
  MemoryAllocator method_alloc(sizeof(method_pool), method_pool);
  MemoryAllocator temp_alloc(sizeof(temp_pool), temp_pool);
  MemoryManager memory(&method_alloc, &planned, &temp_alloc);
  auto method = program->load_method("forward", &memory);
  if (!method.ok()) {
    fprintf(stderr, "load_method failed: 0x%x\n", (int)method.error());
    return 1;
  }
  double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const char* expect = nullptr;
  if (argc >= 6 && strcmp(argv[argc - 2], "--expect") == 0) {
    expect = argv[argc - 1];
    argc -= 2;
  }
  for (int i = 4; i < argc; i++) {
    size_t k = (size_t)(i - 4);
    std::vector<char> data = npy_data(argv[i]);
    const EValue& v = method->get_input(k);
    if (!v.isTensor()) {
      fprintf(stderr, "input %zu is not a tensor\n", k);
      return 1;
    }
    auto t = v.toTensor();
    if ((size_t)t.nbytes() != data.size()) {
      fprintf(stderr, "input %zu: %zu bytes given, %zu expected\n", k, data.size(),
              (size_t)t.nbytes());
      return 1;
    }
    memcpy(t.mutable_data_ptr(), data.data(), data.size());
  }
  int repeat = atoi(argv[2]);
  std::vector<double> times;
  for (int r = 0; r < repeat + 1; r++) {
    auto s = std::chrono::steady_clock::now();
    Error e = method->execute();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
    if (e != Error::Ok) {
      fprintf(stderr, "execute failed: 0x%x\n", (int)e);
      return 1;
    }
    if (r > 0) times.push_back(ms);  // the first run warms up
  }
  std::sort(times.begin(), times.end());
  double med = times.empty() ? 0.0 : times[times.size() / 2];
  printf("load %.3f ms, execute %.3f ms (median of %d), %s thread(s)\n", load_ms, med, repeat,
         argv[3]);
  printf("peak memory (VmHWM) %.1f MiB\n", status_kib("VmHWM:") / 1024.0);
  if (expect) {
    std::vector<char> want = npy_data(expect);
    const EValue& v = method->get_output(0);
    if (!v.isTensor() || v.toTensor().scalar_type() != executorch::aten::ScalarType::Float ||
        (size_t)v.toTensor().nbytes() != want.size()) {
      fprintf(stderr, "output 0 is not a float32 tensor of %zu bytes\n", want.size());
      return 1;
    }
    const float* got = v.toTensor().const_data_ptr<float>();
    size_t n = want.size() / 4;
    float diff = 0;
    for (size_t i = 0; i < n; i++) {
      float w;
      memcpy(&w, want.data() + 4 * i, 4);
      diff = std::max(diff, std::abs(got[i] - w));
    }
    printf("max|diff| %g over %zu values\n", diff, n);
  }
  return 0;
}
