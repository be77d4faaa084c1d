// The C++ wrapper (crates/pteron-c/include/pteron.hpp): classify with a .pte image model, check
// the logits against an expected .npy, then stream a few tokens from an LLM program.
//   classify_cpp MODEL.pte INPUT.npy EXPECTED.npy LLM.pte TOKENIZER.json
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "pteron.hpp"

// A little-endian float32 .npy file (version 1, C order): its elements and shape.
static std::vector<float> read_npy(const std::string &path, std::vector<int64_t> &shape) {
    std::ifstream f(path, std::ios::binary);
    char head[10];
    if (!f.read(head, 10) || std::string(head + 1, 5) != "NUMPY") throw std::runtime_error(path + ": not .npy");
    size_t hlen = static_cast<unsigned char>(head[8]) | (static_cast<unsigned char>(head[9]) << 8);
    std::string dict(hlen, '\0');
    f.read(&dict[0], static_cast<std::streamsize>(hlen));
    if (dict.find("'<f4'") == std::string::npos || dict.find("True") != std::string::npos)
        throw std::runtime_error(path + ": expected float32 in C order");
    size_t open = dict.find('(', dict.find("'shape'"));
    std::stringstream dims(dict.substr(open + 1, dict.find(')', open) - open - 1));
    size_t count = 1;
    for (std::string d; std::getline(dims, d, ',');) {
        if (d.find_first_not_of(' ') == std::string::npos) continue;
        shape.push_back(std::stoll(d));
        count *= static_cast<size_t>(shape.back());
    }
    std::vector<float> data(count);
    if (!f.read(reinterpret_cast<char *>(data.data()), static_cast<std::streamsize>(count * 4)))
        throw std::runtime_error(path + ": short file");
    return data;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        std::cerr << "usage: " << argv[0] << " MODEL.pte INPUT.npy EXPECTED.npy LLM.pte TOKENIZER.json\n";
        return 2;
    }
    try {
        std::vector<int64_t> in_shape, out_shape;
        std::vector<float> x = read_npy(argv[2], in_shape), want = read_npy(argv[3], out_shape);
        pteron::Runtime rt(1);
        pteron::Method method = rt.load_file(argv[1]).load_method("forward");  // the program may go
        pteron::TensorView declared = method.output_info(0);
        method.set_input(0, in_shape, x);
        method.execute();
        pteron::TensorView out = method.output(0);
        const float *y = static_cast<const float *>(out.data);
        size_t n = out.nbytes / sizeof(float);
        double diff = n == want.size() ? 0.0 : INFINITY;
        for (size_t i = 0; i < n && i < want.size(); i++) diff = std::fmax(diff, std::fabs(y[i] - want[i]));
        std::printf("c++: %zu logits (declared %zu bytes), max abs difference %.3g\n", n, declared.nbytes, diff);
        if (diff > 1e-4 || declared.nbytes != out.nbytes) return 1;

        // A wrong input is an exception carrying the status.
        try {
            method.set_input(0, {1, 2}, std::vector<float>{1, 2});
            return 1;
        } catch (const pteron::Error &e) {
            std::printf("c++: refused as expected (status %d)\n", static_cast<int>(e.status()));
        }

        pteron::Program llm = rt.load_file(argv[4]);
        pteron::Generator gen(llm, argv[5], 1);
        PteronGenerateOptions opts = pteron::Generator::default_options();
        opts.max_new_tokens = 16;
        opts.skip_special = 0;
        std::string text;
        int pieces = 0;
        PteronGenerateStats st = gen.generate("Beautiful is better than ugly.", opts,
                                              [&](std::string_view piece) {
                                                  text += piece;
                                                  return ++pieces < 5;  // stop after 5 pieces
                                              });
        std::printf("c++: %d pieces, %zu tokens, finish %d\n", pieces, st.generated_tokens, st.finish_reason);
        return st.finish_reason == 4 && pieces == 5 ? 0 : 1;
    } catch (const std::exception &e) {
        std::cerr << "c++: " << e.what() << "\n";
        return 1;
    }
}
