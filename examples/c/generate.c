/* Streams a greedy generation from an ExecuTorch LLM export through pteron's C API:
 * generate MODEL.pte TOKENIZER PROMPT MAX_NEW_TOKENS [STOP_AFTER_PIECES]
 * The text goes to stdout as it is produced; statistics to stderr. */
#include <stdio.h>
#include <stdlib.h>

#include "pteron.h"

struct stream { int pieces; int stop_after; };

static int on_text(const char *text, size_t len, void *user) {
    struct stream *s = user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    s->pieces++;
    return s->stop_after > 0 && s->pieces >= s->stop_after; /* non-zero: stop */
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL.pte TOKENIZER PROMPT MAX_NEW_TOKENS [STOP_AFTER]\n", argv[0]);
        return 2;
    }
    PteronRuntime *rt = NULL;
    PteronProgram *program = NULL;
    PteronGenerator *gen = NULL;
    PteronGenerateOptions opts;
    PteronGenerateStats stats;
    struct stream s = {0, argc > 5 ? atoi(argv[5]) : 0};
    PteronStatus st = pteron_runtime_new(1, &rt);
    if (st == PTERON_STATUS_OK) st = pteron_program_load_file(rt, argv[1], &program);
    if (st == PTERON_STATUS_OK) st = pteron_generator_new(program, argv[2], 0, &gen);
    if (st == PTERON_STATUS_OK) st = pteron_generate_options_default(&opts);
    if (st == PTERON_STATUS_OK) {
        opts.max_new_tokens = (uint32_t)atoi(argv[4]);
        opts.skip_special = 0;
        st = pteron_generator_generate(gen, argv[3], &opts, on_text, &s, &stats);
    }
    if (st == PTERON_STATUS_OK) {
        fprintf(stderr, "\n%zu prompt tokens, %zu generated, finish %d, decode %.1f tok/s\n",
                stats.prompt_tokens, stats.generated_tokens, stats.finish_reason,
                stats.decode_tokens_per_s);
    } else {
        fprintf(stderr, "error (status %d): %s\n", (int)st, pteron_last_error());
    }
    pteron_generator_free(gen);
    pteron_program_free(program);
    pteron_runtime_free(rt);
    return st == PTERON_STATUS_OK ? 0 : 1;
}
