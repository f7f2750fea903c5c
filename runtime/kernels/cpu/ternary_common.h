/* Shared by every CPU ternary kernel source (ternary_x86.c, ternary_neon.c): the exported API, fp16
   decoding, and scalar reference code that each ISA uses for tails and that defines the results.

   Weight layout (t2, as stored in .ternary / ModelData, never repacked): per row K/4 bytes, read as
   little-endian uint32 words of 16 weights, weight i at bits 2i, code = t + 1 (code 3 = +2, kept
   for Q2_0). fp16 group scales scales[n * (K/G) + g]. K and G are multiples of 16 for the exact
   path and of 32 for the int8 path (G = 64 or 128 in practice).

   int8 activations (why: one vpdpbusd / sdot multiplies 4 weight codes by 4 activations and adds
   them, where fp32 needs one FMA per weight): blocks of 32 along K, amax = max|x|, d = amax / 127
   (fp32), id = d ? 1/d : 0, q = (int8) roundf(x * id) (half away from zero), qsum = sum q. Every ISA
   must produce bit-identical q, d and qsum, so vector code must use a true division (no rcp) and
   round half away from zero; tc_quantize_q8_ref is the definition.

   The int8 matmul is y[m,n] = sum_g f16(s[n,g]) * sum_{32-blocks b in g} d[m,b] * dot(m,n,b) with
   the exact int32 dot(m,n,b) = sum_{i in b} q[m,i] * (code[n,i] - 1) = sum q*code - qsum[m,b];
   only the float summation order may differ between ISAs. */

#ifndef TERNARY_COMMON_H
#define TERNARY_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#define TC_QBLOCK 32  /* activations per int8 block (one d, one qsum) */

#if defined(__GNUC__)
#define TC_EXPORT __attribute__((visibility("default")))
#else
#define TC_EXPORT
#endif

/* ------------------------------------------------------------------ exported by every ISA source */
TC_EXPORT const char *kernel_name(void);  /* "avx512-vnni", "avx512", "avx2-vnni", "avx2",
                                             "neon-dotprod", "neon", "c" */
TC_EXPORT int kernel_isa(void);           /* vector width: 512, 256, 128 (neon), 0 (c) */
TC_EXPORT void ternary_mm(const float *x, const uint32_t *words, const uint16_t *scales, float *y,
                          int64_t M, int64_t N, int64_t K, int64_t G, int64_t ldy, int nthreads);
TC_EXPORT void ternary_rows(const int64_t *ids, int64_t count, const uint32_t *words,
                            const uint16_t *scales, float *out, int64_t K, int64_t G);
TC_EXPORT void quantize_q8(const float *x, int64_t M, int64_t K, int8_t *q, float *d, int32_t *qsum);
TC_EXPORT void ternary_mm_q8(const int8_t *q, const float *d, const int32_t *qsum,
                             const uint32_t *words, const uint16_t *scales, float *y,
                             int64_t M, int64_t N, int64_t K, int64_t G, int64_t ldy, int nthreads);

/* one matmul call's operands, for its thread-pool jobs (ternary_pool.h): x for the exact path, q / d / qsum
   for the int8 path; m0..m1 the tokens of the current pass */
typedef struct {
    const float *x;
    const int8_t *q;
    const float *d;
    const int32_t *qsum;
    const uint32_t *words;
    const uint16_t *scales;
    float *y;
    int64_t M, N, K, G, ldy, m0, m1;
} tc_mm_args;

/* ------------------------------------------------------------------ fp16 -> fp32 (exact) */
static inline float h2f(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#elif defined(__aarch64__)
    __fp16 v;
    memcpy(&v, &h, 2);
    return (float)v;
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            bits = sign | (exp << 23) | ((man & 0x3FF) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000 | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

/* code (0..3) of weight k in a row of words */
static inline int tc_code(const uint32_t *row, int64_t k) {
    return (int)((row[k >> 4] >> (2 * (k & 15))) & 3);
}

/* ------------------------------------------------------------------ reference: int8 quantisation */
/* Rows m0..m1 of x (M x K) -> q (M x K), d and qsum (M x K/32). The definition every ISA matches. */
static inline void tc_quantize_q8_ref(const float *x, int64_t m0, int64_t m1, int64_t K,
                                      int8_t *q, float *d, int32_t *qsum) {
    const int64_t NB = K / TC_QBLOCK;
    for (int64_t m = m0; m < m1; m++) {
        for (int64_t b = 0; b < NB; b++) {
            const float *xb = x + m * K + b * TC_QBLOCK;
            int8_t *qb = q + m * K + b * TC_QBLOCK;
            float amax = 0.0f;
            for (int i = 0; i < TC_QBLOCK; i++) {
                float a = fabsf(xb[i]);
                amax = a > amax ? a : amax;
            }
            const float dd = amax / 127.0f;
            const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
            int32_t s = 0;
            for (int i = 0; i < TC_QBLOCK; i++) {
                qb[i] = (int8_t)roundf(xb[i] * id);
                s += qb[i];
            }
            d[m * NB + b] = dd;
            qsum[m * NB + b] = s;
        }
    }
}

/* ------------------------------------------------------------------ reference: exact fp32 matmul */
/* y[m, n] for m in [m0, m1), n in [n0, n1): every weight is exactly (code - 1) * s in fp32. */
static inline void tc_ternary_mm_ref(const float *x, const uint32_t *words, const uint16_t *scales,
                                     float *y, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                                     int64_t K, int64_t G, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    for (int64_t n = n0; n < n1; n++) {
        for (int64_t m = m0; m < m1; m++) {
            const float *xm = x + m * K;
            float total = 0.0f;
            for (int64_t g = 0; g < NG; g++) {
                const float s = h2f(scales[n * NG + g]);
                for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
                    const uint32_t word = words[n * KC + c];
                    for (int i = 0; i < 16; i++)
                        total += (float)((int)((word >> (2 * i)) & 3) - 1) * s * xm[c * 16 + i];
                }
            }
            y[m * ldy + n] = total;
        }
    }
}

/* ------------------------------------------------------------------ reference: int8 x ternary */
/* exact int32 dot of one 32-block: sum q * code - qsum (codes unsigned 0..3) */
static inline int32_t tc_block_dot_ref(const int8_t *qb, const uint32_t *wb, int32_t qs) {
    int32_t acc = 0;
    for (int i = 0; i < TC_QBLOCK; i++) acc += (int32_t)qb[i] * tc_code(wb, i);
    return acc - qs;
}

static inline void tc_ternary_mm_q8_ref(const int8_t *q, const float *d, const int32_t *qsum,
                                        const uint32_t *words, const uint16_t *scales, float *y,
                                        int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                                        int64_t K, int64_t G, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, NB = K / TC_QBLOCK, BPG = G / TC_QBLOCK;
    for (int64_t n = n0; n < n1; n++) {
        for (int64_t m = m0; m < m1; m++) {
            float total = 0.0f;
            for (int64_t g = 0; g < NG; g++) {
                float gsum = 0.0f;
                for (int64_t b = g * BPG; b < (g + 1) * BPG; b++)
                    gsum += d[m * NB + b] * (float)tc_block_dot_ref(q + m * K + b * TC_QBLOCK,
                                                                    words + n * KC + b * 2,
                                                                    qsum[m * NB + b]);
                total += h2f(scales[n * NG + g]) * gsum;
            }
            y[m * ldy + n] = total;
        }
    }
}

/* ------------------------------------------------------------------ reference: row gather */
static inline void tc_ternary_rows_ref(const int64_t *ids, int64_t count, const uint32_t *words,
                                       const uint16_t *scales, float *out, int64_t K, int64_t G) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    for (int64_t i = 0; i < count; i++) {
        const uint32_t *p = words + ids[i] * KC;
        const uint16_t *s = scales + ids[i] * NG;
        float *o = out + i * K;
        for (int64_t g = 0; g < NG; g++) {
            const float sc = h2f(s[g]);
            for (int64_t c = g * CPG; c < (g + 1) * CPG; c++)
                for (int j = 0; j < 16; j++)
                    o[c * 16 + j] = (float)((int)((p[c] >> (2 * j)) & 3) - 1) * sc;
        }
    }
}

#endif /* TERNARY_COMMON_H */
