/* Exact fp32 ternary matmul for the CPU backend "cpu_ternary" (see cpu_ternary.py).

   Weights are kept as two bit planes per 16 input columns, packed in one uint32:
   bits 0..15 say "weight is +1", bits 16..31 "weight is -1" (bit i = column 16c + i), i.e. 2 bits per
   weight like the t2 codes, plus the fp16 group scales as stored. y = x W^T is computed as
   sum_g s_g * (sum of x where t = +1 - sum of x where t = -1) per group (decode, masked adds) or
   with weights dequantized on the fly to +-s / 0 and FMAs (prefill). Both are exact fp32 math on the
   exact weights; results differ from a dense fp32 matmul only by summation order.

   Built by cpu_ternary.py with the host compiler (-O3 -march=native -fopenmp). Linking -fopenmp to
   libgomp.so.1 makes it share the OpenMP runtime torch already loaded, so the two never fight over
   the cores. */

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#define TOKEN_TILE 32

static inline float h2f(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
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

int kernel_isa(void) {
#if defined(__AVX512F__)
    return 512;
#elif defined(__AVX2__) && defined(__FMA__)
    return 256;
#else
    return 0;
#endif
}

#if defined(__AVX512F__)
/* ---------------------------------------------------------------- AVX-512 */
typedef __m512 vacc;

/* decode: R rows, one token at a time, masked adds into separate +/- accumulators per group */
static inline __attribute__((always_inline)) void rows_kernel(
    const float *x, const uint32_t *planes, const uint16_t *scales, float *y,
    int64_t n0, int R, int64_t K, int64_t G, int64_t M, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    for (int64_t m = 0; m < M; m++) {
        const float *xm = x + m * K;
        __m512 racc[4];
        for (int r = 0; r < R; r++) racc[r] = _mm512_setzero_ps();
        for (int64_t g = 0; g < NG; g++) {
            __m512 pa[4], na[4];
            for (int r = 0; r < R; r++) { pa[r] = _mm512_setzero_ps(); na[r] = _mm512_setzero_ps(); }
            for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
                __m512 xv = _mm512_loadu_ps(xm + c * 16);
                for (int r = 0; r < R; r++) {
                    uint32_t bits = planes[(n0 + r) * KC + c];
                    pa[r] = _mm512_mask_add_ps(pa[r], (__mmask16)(bits & 0xFFFF), pa[r], xv);
                    na[r] = _mm512_mask_add_ps(na[r], (__mmask16)(bits >> 16), na[r], xv);
                }
            }
            for (int r = 0; r < R; r++)
                racc[r] = _mm512_fmadd_ps(_mm512_sub_ps(pa[r], na[r]),
                                          _mm512_set1_ps(h2f(scales[(n0 + r) * NG + g])), racc[r]);
        }
        for (int r = 0; r < R; r++) y[m * ldy + n0 + r] = _mm512_reduce_add_ps(racc[r]);
    }
}

/* prefill: R rows x T tokens register block; w = +-s or 0 built from the planes, then FMAs */
static inline __attribute__((always_inline)) void block_kernel(
    const float *x, const uint32_t *planes, const uint16_t *scales, float *y,
    int64_t n0, int R, int64_t m0, int T, int64_t K, int64_t G, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    __m512 acc[4][4];
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < NG; g++) {
        __m512 sp[4], sn[4];
        for (int r = 0; r < R; r++) {
            sp[r] = _mm512_set1_ps(h2f(scales[(n0 + r) * NG + g]));
            sn[r] = _mm512_sub_ps(_mm512_setzero_ps(), sp[r]);
        }
        for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
            __m512 xv[4];
            for (int t = 0; t < T; t++) xv[t] = _mm512_loadu_ps(x + (m0 + t) * K + c * 16);
            for (int r = 0; r < R; r++) {
                uint32_t bits = planes[(n0 + r) * KC + c];
                __m512 w = _mm512_mask_blend_ps((__mmask16)(bits >> 16),
                                                _mm512_maskz_mov_ps((__mmask16)(bits & 0xFFFF), sp[r]), sn[r]);
                for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(w, xv[t], acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++)
        y[(m0 + t) * ldy + n0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

#elif defined(__AVX2__) && defined(__FMA__)
/* ---------------------------------------------------------------- AVX2: 16 columns = two 8-lane halves */
static inline __m256 lane_mask(uint32_t bits8) {
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i v = _mm256_and_si256(_mm256_set1_epi32((int)bits8), sel);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(v, sel));
}

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) void block_kernel(
    const float *x, const uint32_t *planes, const uint16_t *scales, float *y,
    int64_t n0, int R, int64_t m0, int T, int64_t K, int64_t G, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    __m256 acc[4][4];
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < NG; g++) {
        __m256 sp[4], sn[4];
        for (int r = 0; r < R; r++) {
            sp[r] = _mm256_set1_ps(h2f(scales[(n0 + r) * NG + g]));
            sn[r] = _mm256_sub_ps(_mm256_setzero_ps(), sp[r]);
        }
        for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
            for (int half = 0; half < 2; half++) {
                __m256 xv[4];
                for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps(x + (m0 + t) * K + c * 16 + half * 8);
                for (int r = 0; r < R; r++) {
                    uint32_t bits = planes[(n0 + r) * KC + c] >> (8 * half);
                    __m256 w = _mm256_or_ps(_mm256_and_ps(lane_mask(bits & 0xFF), sp[r]),
                                            _mm256_and_ps(lane_mask((bits >> 16) & 0xFF), sn[r]));
                    for (int t = 0; t < T; t++) acc[r][t] = _mm256_fmadd_ps(w, xv[t], acc[r][t]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) y[(m0 + t) * ldy + n0 + r] = hsum256(acc[r][t]);
}

static inline __attribute__((always_inline)) void rows_kernel(
    const float *x, const uint32_t *planes, const uint16_t *scales, float *y,
    int64_t n0, int R, int64_t K, int64_t G, int64_t M, int64_t ldy) {
    for (int64_t m = 0; m < M; m++) block_kernel(x, planes, scales, y, n0, R, m, 1, K, G, ldy);
}

#else
/* ---------------------------------------------------------------- portable C */
static void block_kernel(const float *x, const uint32_t *planes, const uint16_t *scales, float *y,
                         int64_t n0, int R, int64_t m0, int T, int64_t K, int64_t G, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    for (int r = 0; r < R; r++) {
        for (int t = 0; t < T; t++) {
            const float *xm = x + (m0 + t) * K;
            float total = 0.0f;
            for (int64_t g = 0; g < NG; g++) {
                float part = 0.0f;
                for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
                    uint32_t bits = planes[(n0 + r) * KC + c];
                    for (int i = 0; i < 16; i++) {
                        if (bits & (1u << i)) part += xm[c * 16 + i];
                        if (bits & (1u << (16 + i))) part -= xm[c * 16 + i];
                    }
                }
                total += part * h2f(scales[(n0 + r) * NG + g]);
            }
            y[(m0 + t) * ldy + n0 + r] = total;
        }
    }
}

static void rows_kernel(const float *x, const uint32_t *planes, const uint16_t *scales, float *y,
                        int64_t n0, int R, int64_t K, int64_t G, int64_t M, int64_t ldy) {
    block_kernel(x, planes, scales, y, n0, R, 0, (int)M, K, G, ldy);
}
#endif

static void block_range(const float *x, const uint32_t *planes, const uint16_t *scales, float *y,
                        int64_t n0, int R, int64_t m0, int64_t m1, int64_t K, int64_t G, int64_t ldy) {
    int64_t m = m0;
    if (R == 4) {
        for (; m + 4 <= m1; m += 4) block_kernel(x, planes, scales, y, n0, 4, m, 4, K, G, ldy);
        for (; m < m1; m++) block_kernel(x, planes, scales, y, n0, 4, m, 1, K, G, ldy);
    } else {
        for (; m + 4 <= m1; m += 4) block_kernel(x, planes, scales, y, n0, 1, m, 4, K, G, ldy);
        for (; m < m1; m++) block_kernel(x, planes, scales, y, n0, 1, m, 1, K, G, ldy);
    }
}

/* y[m, n] (row stride ldy) = sum_k x[m, k] * w[n, k]; K and G multiples of 16, G divides K. */
void ternary_mm(const float *x, const uint32_t *planes, const uint16_t *scales, float *y,
                int64_t M, int64_t N, int64_t K, int64_t G, int64_t ldy, int nthreads) {
    const int64_t nb = N / 4;
    if (M < 4) {
        #pragma omp parallel for schedule(static) num_threads(nthreads)
        for (int64_t b = 0; b < nb; b++) rows_kernel(x, planes, scales, y, b * 4, 4, K, G, M, ldy);
        for (int64_t n = nb * 4; n < N; n++) rows_kernel(x, planes, scales, y, n, 1, K, G, M, ldy);
        return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += TOKEN_TILE) {
        int64_t m1 = m0 + TOKEN_TILE < M ? m0 + TOKEN_TILE : M;
        #pragma omp parallel for schedule(static) num_threads(nthreads)
        for (int64_t b = 0; b < nb; b++) block_range(x, planes, scales, y, b * 4, 4, m0, m1, K, G, ldy);
        for (int64_t n = nb * 4; n < N; n++) block_range(x, planes, scales, y, n, 1, m0, m1, K, G, ldy);
    }
}

/* t2 codes uint8 [N][K/4] (4 codes per byte, LSB first, code = t + 1) -> planes uint32 [N][K/16].
   mode 0: +1 plane = code >= 2, -1 plane = code == 0 (so Q2_0's code 3, t = +2, counts as +1 here);
   mode 1: +1 plane = code == 3 only (the remaining +1 of t = +2). Returns 1 if any code is 3. */
int t2_to_planes(const uint8_t *codes, uint32_t *planes, int64_t N, int64_t K, int mode, int nthreads) {
    int saw3 = 0;
    const int64_t KC = K / 16;
    #pragma omp parallel for schedule(static) num_threads(nthreads) reduction(|:saw3)
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = codes + n * (K / 4);
        for (int64_t c = 0; c < KC; c++) {
            uint32_t pos = 0, neg = 0;
            for (int i = 0; i < 16; i++) {
                int64_t k = c * 16 + i;
                int code = (row[k >> 2] >> (2 * (k & 3))) & 3;
                if (mode == 0) {
                    pos |= (uint32_t)(code >= 2) << i;
                    neg |= (uint32_t)(code == 0) << i;
                } else {
                    pos |= (uint32_t)(code == 3) << i;
                }
                saw3 |= code == 3;
            }
            planes[n * KC + c] = pos | (neg << 16);
        }
    }
    return saw3;
}

/* Embedding gather straight from the planes: out[i, :] = row ids[i] of W, exact. */
void ternary_rows(const int64_t *ids, int64_t count, const uint32_t *planes, const uint16_t *scales,
                  float *out, int64_t K, int64_t G) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    for (int64_t i = 0; i < count; i++) {
        const uint32_t *p = planes + ids[i] * KC;
        const uint16_t *s = scales + ids[i] * NG;
        float *o = out + i * K;
        for (int64_t g = 0; g < NG; g++) {
            float sc = h2f(s[g]);
            for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
                uint32_t bits = p[c];
                for (int j = 0; j < 16; j++)
                    o[c * 16 + j] = (bits & (1u << j)) ? sc : ((bits & (1u << (16 + j))) ? -sc : 0.0f);
            }
        }
    }
}
