// ExecuTorch's own runtime (the libraries its Linux aarch64 wheel ships) on a .pte, for
// instruction counts under QEMU beside pteron's (tools/dev/aarch64_et_counts.sh).
// Usage: et_run MODEL.pte REPEAT [INPUT0.npy EXPECTED0.npy]
// Runs `forward` REPEAT times on one thread; with the .npy files, feeds the float32 input
// and prints the largest difference of output 0 from the expected float32 array.
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

// From libexecutorch_threadpool.so (the wheel ships no header for it).
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

using executorch::aten::ScalarType;
using executorch::extension::Module;
using executorch::runtime::EValue;

// The float32 payload of a version-1 .npy file (little-endian '<f4', C order).
static std::vector<float> read_npy_f32(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
  if (bytes.size() < 10 || bytes[6] != 1) {
    std::fprintf(stderr, "%s: not a version-1 .npy file\n", path);
    std::exit(2);
  }
  size_t header = 10 + (uint8_t)bytes[8] + 256 * (size_t)(uint8_t)bytes[9];
  std::string dict(bytes.begin() + 10, bytes.begin() + header);
  if (dict.find("<f4") == std::string::npos || header > bytes.size()) {
    std::fprintf(stderr, "%s: not float32\n", path);
    std::exit(2);
  }
  std::vector<float> out((bytes.size() - header) / 4);
  std::memcpy(out.data(), bytes.data() + header, out.size() * 4);
  return out;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: et_run MODEL.pte REPEAT [INPUT0.npy EXPECTED0.npy]\n");
    return 2;
  }
  int repeat = std::atoi(argv[2]);
  executorch::extension::threadpool::get_threadpool()->_unsafe_reset_threadpool(1);
  Module module(argv[1], Module::LoadMode::Mmap);
  if (module.load_method("forward") != executorch::runtime::Error::Ok) {
    std::fprintf(stderr, "load_method failed\n");
    return 1;
  }
  auto meta = module.method_meta("forward");
  auto in = meta->input_tensor_meta(0);
  std::vector<executorch::aten::SizesType> sizes(in->sizes().begin(), in->sizes().end());
  size_t numel = 1;
  for (auto s : sizes) numel *= s;
  std::vector<float> data(numel);
  if (argc == 5) {
    data = read_npy_f32(argv[3]);
    if (data.size() != numel) {
      std::fprintf(stderr, "input has %zu values, the method takes %zu\n", data.size(), numel);
      return 1;
    }
  } else {
    for (size_t i = 0; i < numel; ++i) data[i] = (float)(i % 255) / 255.0f;
  }
  auto input = executorch::extension::make_tensor_ptr(sizes, data);
  std::vector<EValue> outputs;
  for (int r = 0; r < repeat; ++r) {
    auto result = module.forward(input);
    if (!result.ok()) {
      std::fprintf(stderr, "forward failed: %d\n", (int)result.error());
      return 1;
    }
    outputs = *result;
  }
  if (argc == 5 && !outputs.empty()) {
    auto expected = read_npy_f32(argv[4]);
    const auto& t = outputs[0].toTensor();
    if ((size_t)t.numel() != expected.size() || t.scalar_type() != ScalarType::Float) {
      std::fprintf(stderr, "output 0 differs in size or type from the expected array\n");
      return 1;
    }
    float diff = 0;
    for (size_t i = 0; i < expected.size(); ++i)
      diff = std::fmax(diff, std::fabs(t.const_data_ptr<float>()[i] - expected[i]));
    std::printf("max|diff| %g over %zu values\n", diff, expected.size());
  }
  return 0;
}
