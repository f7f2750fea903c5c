/* Runs every function of runtime/kernels/cpu/ternary_neon.c on cases read from a file and writes the
   results to another, so tests/cpu/test_cpu_neon_qemu.py can check the ARM kernel against torch on an
   x86 machine (cross-compiled, run under qemu-user). One process runs all cases: qemu starts once.

   Usage: neon_harness CASES_IN RESULTS_OUT; prints "kernel_name kernel_isa" on stdout.

   Input, little-endian: int64 ncases, then per case int64 M, N, K, G, ldy, count, nthreads, followed by
   float32 x[M*K], uint32 words[N*K/16], uint16 scales[N*K/G], int64 ids[count].
   Output per case: float32 y[M*ldy] of ternary_mm, then only where K and G are multiples of 32 (the
   int8 path's contract; the exact path needs 16) int8 q[M*K], float32 d[M*K/32], int32 qsum[M*K/32] and
   float32 y8[M*ldy] of ternary_mm_q8, then float32 rows[count*K] of ternary_rows. y and y8 start as NaN
   everywhere, so columns n >= N must come back NaN (nothing written outside the output). */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ternary_common.h"

static void fail(const char *what) {
    fprintf(stderr, "neon_harness: %s\n", what);
    exit(2);
}

static void *read_n(FILE *f, size_t size, int64_t n) {
    if (n < 0 || n > ((int64_t)1 << 30)) fail("bad element count in the case file");
    void *p = malloc(size * (size_t)n + 64);
    if (!p) fail("out of memory");
    if (n && fread(p, size, (size_t)n, f) != (size_t)n) fail("case file ends early");
    return p;
}

static void write_n(FILE *f, const void *p, size_t size, int64_t n) {
    if (n && fwrite(p, size, (size_t)n, f) != (size_t)n) fail("cannot write the results");
}

static float *nan_filled(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)n + 64);
    if (!p) fail("out of memory");
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

int main(int argc, char **argv) {
    if (argc != 3) fail("usage: neon_harness CASES_IN RESULTS_OUT");
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) fail("cannot open the case or result file");
    int64_t ncases;
    if (fread(&ncases, 8, 1, in) != 1) fail("empty case file");
    for (int64_t c = 0; c < ncases; c++) {
        int64_t h[7];
        if (fread(h, 8, 7, in) != 7) fail("case header missing");
        const int64_t M = h[0], N = h[1], K = h[2], G = h[3], ldy = h[4], count = h[5];
        const int nthreads = (int)h[6];
        if (M < 1 || N < 1 || K % 16 || G % 16 || G < 16 || K % G || ldy < N) fail("bad case shape");
        const int int8 = K % 32 == 0 && G % 32 == 0;
        float *x = read_n(in, sizeof(float), M * K);
        uint32_t *words = read_n(in, sizeof(uint32_t), N * K / 16);
        uint16_t *scales = read_n(in, sizeof(uint16_t), N * (K / G));
        int64_t *ids = read_n(in, sizeof(int64_t), count);
        for (int64_t i = 0; i < count; i++) if (ids[i] < 0 || ids[i] >= N) fail("row id out of range");

        float *y = nan_filled(M * ldy), *y8 = nan_filled(M * ldy), *rows = nan_filled(count * K);
        int8_t *q = malloc((size_t)(M * K) + 64);
        float *d = malloc(sizeof(float) * (size_t)(M * K / 32) + 64);
        int32_t *qsum = malloc(sizeof(int32_t) * (size_t)(M * K / 32) + 64);
        if (!q || !d || !qsum) fail("out of memory");

        ternary_mm(x, words, scales, y, M, N, K, G, ldy, nthreads);
        ternary_rows(ids, count, words, scales, rows, K, G);
        write_n(out, y, sizeof(float), M * ldy);
        if (int8) {
            quantize_q8(x, M, K, q, d, qsum);
            ternary_mm_q8(q, d, qsum, words, scales, y8, M, N, K, G, ldy, nthreads);
            write_n(out, q, 1, M * K);
            write_n(out, d, sizeof(float), M * K / 32);
            write_n(out, qsum, sizeof(int32_t), M * K / 32);
            write_n(out, y8, sizeof(float), M * ldy);
        }
        write_n(out, rows, sizeof(float), count * K);
        free(x); free(words); free(scales); free(ids); free(y); free(y8); free(rows);
        free(q); free(d); free(qsum);
    }
    if (fclose(out) != 0) fail("cannot write the results");
    fclose(in);
    printf("%s %d\n", kernel_name(), kernel_isa());
    return 0;
}
