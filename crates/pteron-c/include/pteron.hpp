// pteron.hpp: a header-only C++17 wrapper of pteron.h. Objects free themselves (RAII), a
// failing call throws pteron::Error with the library's status and message, and the ownership
// rules of pteron.h hold unchanged (a Method or Generator may outlive its Program).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pteron.h"

namespace pteron {

/// A failed call: the status and pteron_last_error()'s text.
class Error : public std::runtime_error {
public:
    Error(PteronStatus status, const std::string &what)
        : std::runtime_error(what), status_(status) {}
    PteronStatus status() const noexcept { return status_; }

private:
    PteronStatus status_;
};

namespace detail {
inline void check(PteronStatus s, const char *what) {
    if (s != PTERON_STATUS_OK) {
        const char *msg = pteron_last_error();
        throw Error(s, std::string(what) + ": " + (msg ? msg : "unknown error"));
    }
}
template <typename T, void (*Free)(T *)> struct Deleter {
    void operator()(T *p) const noexcept { Free(p); }
};
template <typename T, void (*Free)(T *)> using Handle = std::unique_ptr<T, Deleter<T, Free>>;
}  // namespace detail

/// A tensor's dtype, sizes and bytes, as pteron.h's view (the bytes are borrowed).
using TensorView = PteronTensorView;

class Method {
public:
    explicit Method(PteronMethod *m) : m_(m) {}
    size_t num_inputs() const {
        size_t n = 0;
        detail::check(pteron_method_num_inputs(m_.get(), &n), "num_inputs");
        return n;
    }
    size_t num_outputs() const {
        size_t n = 0;
        detail::check(pteron_method_num_outputs(m_.get(), &n), "num_outputs");
        return n;
    }
    /// The declared input / output (data NULL, nbytes the declared size).
    TensorView input_info(size_t i) const {
        TensorView v{};
        detail::check(pteron_method_input(m_.get(), i, &v), "input_info");
        return v;
    }
    TensorView output_info(size_t i) const {
        TensorView v{};
        detail::check(pteron_method_output_info(m_.get(), i, &v), "output_info");
        return v;
    }
    /// Sets input i: `dtype` is ExecuTorch's ScalarType code (6: float32).
    void set_input(size_t i, int32_t dtype, const std::vector<int64_t> &sizes, const void *data,
                   size_t nbytes) {
        if (sizes.size() > PTERON_MAX_RANK) throw Error(PTERON_STATUS_INVALID_ARGUMENT, "rank > 16");
        TensorView v{};
        v.dtype = dtype;
        v.rank = static_cast<uint32_t>(sizes.size());
        for (size_t d = 0; d < sizes.size(); d++) v.sizes[d] = sizes[d];
        v.data = data;
        v.nbytes = nbytes;
        detail::check(pteron_method_set_input(m_.get(), i, &v), "set_input");
    }
    void set_input(size_t i, const std::vector<int64_t> &sizes, const std::vector<float> &data) {
        set_input(i, 6, sizes, data.data(), data.size() * sizeof(float));
    }
    void execute() { detail::check(pteron_method_execute(m_.get()), "execute"); }
    /// Output i of the last execution; valid until the method next changes.
    TensorView output(size_t i) {
        TensorView v{};
        detail::check(pteron_method_output(m_.get(), i, &v), "output");
        return v;
    }

private:
    detail::Handle<PteronMethod, pteron_method_free> m_;
};

class Program {
public:
    explicit Program(PteronProgram *p) : p_(p) {}
    std::vector<std::string> method_names() const {
        size_t n = 0;
        detail::check(pteron_program_method_count(p_.get(), &n), "method_count");
        std::vector<std::string> names;
        for (size_t i = 0; i < n; i++) {
            const char *name = nullptr;
            detail::check(pteron_program_method_name(p_.get(), i, &name), "method_name");
            names.emplace_back(name);
        }
        return names;
    }
    /// `threads`: 0 for the runtime's, 1 for the calling thread only, n for a pool of n.
    Method load_method(const std::string &name, uint32_t threads = 0) const {
        PteronMethod *m = nullptr;
        detail::check(pteron_method_load(p_.get(), name.c_str(), threads, &m), "load_method");
        return Method(m);
    }
    const PteronProgram *get() const noexcept { return p_.get(); }

private:
    detail::Handle<PteronProgram, pteron_program_free> p_;
};

class Runtime {
public:
    /// `threads`: 0 for one per physical core, 1 for the calling thread only, n for a pool.
    explicit Runtime(uint32_t threads = 0) {
        PteronRuntime *r = nullptr;
        detail::check(pteron_runtime_new(threads, &r), "runtime");
        r_.reset(r);
    }
    Program load_file(const std::string &path) const {
        PteronProgram *p = nullptr;
        detail::check(pteron_program_load_file(r_.get(), path.c_str(), &p), "load_file");
        return Program(p);
    }
    /// Copies the bytes (they may be freed when this returns).
    Program load_buffer(const void *data, size_t len) const {
        PteronProgram *p = nullptr;
        detail::check(pteron_program_load_buffer(r_.get(), static_cast<const uint8_t *>(data), len, &p),
                      "load_buffer");
        return Program(p);
    }

private:
    detail::Handle<PteronRuntime, pteron_runtime_free> r_;
};

/// An LLM program and its tokenizer; generate() streams text to a callback that returns
/// false to stop.
class Generator {
public:
    Generator(const Program &program, const std::string &tokenizer, uint32_t threads = 0) {
        PteronGenerator *g = nullptr;
        detail::check(pteron_generator_new(program.get(), tokenizer.c_str(), threads, &g),
                      "generator");
        g_.reset(g);
    }
    static PteronGenerateOptions default_options() {
        PteronGenerateOptions o{};
        detail::check(pteron_generate_options_default(&o), "options");
        return o;
    }
    PteronGenerateStats generate(const std::string &prompt, const PteronGenerateOptions &options,
                                 const std::function<bool(std::string_view)> &on_text = {}) {
        PteronGenerateStats stats{};
        // The callback must not throw into C: an exception ends generation and is rethrown.
        struct Ctx {
            const std::function<bool(std::string_view)> *f;
            std::exception_ptr error;
        } ctx{&on_text, nullptr};
        auto trampoline = [](const char *text, size_t len, void *user) -> int {
            auto *c = static_cast<Ctx *>(user);
            try {
                return (*c->f)(std::string_view(text, len)) ? 0 : 1;
            } catch (...) {
                c->error = std::current_exception();
                return 1;
            }
        };
        detail::check(pteron_generator_generate(g_.get(), prompt.c_str(), &options,
                                                on_text ? +trampoline : nullptr, &ctx, &stats),
                      "generate");
        if (ctx.error) std::rethrow_exception(ctx.error);
        return stats;
    }

private:
    detail::Handle<PteronGenerator, pteron_generator_free> g_;
};

}  // namespace pteron
