/* Classifies with a .pte image model through pteron's C API and checks the logits against an
 * expected .npy: classify MODEL.pte INPUT.npy EXPECTED.npy
 * Prints the top class and the largest difference; exits 1 if it is over 1e-4. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pteron.h"

/* A little-endian float32 .npy file (version 1 or 2, C order): its elements and shape. */
static float *read_npy(const char *path, int64_t *sizes, uint32_t *rank, size_t *count) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return NULL; }
    unsigned char head[12];
    if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) {
        fprintf(stderr, "%s: not a .npy file\n", path); fclose(f); return NULL;
    }
    size_t hlen = head[8] | (head[9] << 8);
    if (head[6] >= 2) {
        if (fread(head + 10, 1, 2, f) != 2) { fclose(f); return NULL; }
        hlen |= ((size_t)head[10] << 16) | ((size_t)head[11] << 24);
    }
    char *dict = calloc(hlen + 1, 1);
    if (!dict || fread(dict, 1, hlen, f) != hlen || !strstr(dict, "'<f4'") || strstr(dict, "True")) {
        fprintf(stderr, "%s: expected a float32 array in C order\n", path);
        free(dict); fclose(f); return NULL;
    }
    const char *shape = strstr(dict, "'shape'");
    const char *p = shape ? strchr(shape, '(') : NULL;
    if (!p) { fprintf(stderr, "%s: no shape\n", path); free(dict); fclose(f); return NULL; }
    p++;
    *rank = 0; *count = 1;
    while (*p && *p != ')') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        if (v < 0 || *rank == PTERON_MAX_RANK) {
            fprintf(stderr, "%s: bad shape\n", path); free(dict); fclose(f); return NULL;
        }
        sizes[(*rank)++] = v; *count *= (size_t)v; p = end;
    }
    free(dict);
    float *data = malloc(*count * sizeof(float));
    if (!data || fread(data, sizeof(float), *count, f) != *count) {
        fprintf(stderr, "%s: short file\n", path); free(data); fclose(f); return NULL;
    }
    fclose(f);
    return data;
}

static int check(PteronStatus s, const char *what) {
    if (s != PTERON_STATUS_OK) fprintf(stderr, "%s: %s (status %d)\n", what, pteron_last_error(), (int)s);
    return s == PTERON_STATUS_OK;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s MODEL.pte INPUT.npy EXPECTED.npy\n", argv[0]); return 2; }
    PteronTensorView input = {0}, expected = {0}, out;
    size_t n_in, n_exp;
    float *x = read_npy(argv[2], input.sizes, &input.rank, &n_in);
    float *want = read_npy(argv[3], expected.sizes, &expected.rank, &n_exp);
    if (!x || !want) return 1;
    input.dtype = 6; /* float32 */
    input.data = x;
    input.nbytes = n_in * sizeof(float);

    PteronRuntime *rt = NULL;
    PteronProgram *program = NULL;
    PteronMethod *method = NULL;
    int ok = check(pteron_runtime_new(1, &rt), "runtime")
          && check(pteron_program_load_file(rt, argv[1], &program), "load program")
          && check(pteron_method_load(program, "forward", 0, &method), "load method")
          && check(pteron_method_set_input(method, 0, &input), "set input")
          && check(pteron_method_execute(method), "execute")
          && check(pteron_method_output(method, 0, &out), "output");
    int rc = 1;
    if (ok) {
        const float *y = out.data;
        size_t n = out.nbytes / sizeof(float);
        size_t best = 0;
        double diff = n == n_exp ? 0.0 : INFINITY;
        for (size_t i = 0; i < n && i < n_exp; i++) {
            if (y[i] > y[best]) best = i;
            double d = fabs((double)y[i] - (double)want[i]);
            if (d > diff) diff = d;
        }
        printf("class %zu (logit %.6f) of %zu; max abs difference from expected %.3g\n", best, y[best], n, diff);
        rc = out.dtype == 6 && diff <= 1e-4 ? 0 : 1;
    }
    /* Freed in an order the ownership rules allow: the method keeps the program's bytes. */
    pteron_program_free(program);
    pteron_method_free(method);
    pteron_runtime_free(rt);
    free(x); free(want);
    return rc;
}
