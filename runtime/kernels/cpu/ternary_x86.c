/* x86 kernels for the CPU backend "cpu_ternary" (see cpu_ternary.py): AVX-512 (+VNNI), AVX2 (+AVX-VNNI)
   and portable C, chosen by the compile flags cpu_ternary.py passes (one shared library per ISA).

   exact path (ternary_mm): every weight is materialized in a register as exactly (code - 1) * s in
   fp32 and multiplied with FMAs, so the result equals a dense fp32 matmul on the exact weights up to
   summation order.

   int8 path (quantize_q8 + ternary_mm_q8, rules in ternary_common.h): why: the fp32 path spends ~4
   instructions per 16 weights and is compute-bound on cores slower than Zen 4; int8 activations let
   one vpdpbusd multiply-add 64 weights. Layout trick: a chunk of CW weights is one vector of codes
   (byte j holds weights 4j..4j+3); shifting it right by 2p and masking gives "plane" p, whose byte
   j is the code of weight 4j+p, with no table or shuffle per weight. The activations are permuted
   once per call into the same plane order (prep_q8), with the per-lane d and -qsum (so the int32 dot
   of the unsigned codes 0..3 becomes the exact dot with code - 1). Int32 lane L of a plane covers
   weights 16L..16L+15 (+p), all in 32-block L/2, so one cvt + one multiply by the lane's d per chunk
   applies the block scales.

   Threads: ternary_pool.h (chunks claimed from an atomic counter, so a core taken by another
   process does not stall the matmul), nthreads = torch.get_num_threads() from the caller. */

#define _POSIX_C_SOURCE 200809L  /* clock_gettime, pthread_atfork under -std=c11 (ternary_pool.h) */

#include <stdlib.h>

#include "ternary_common.h"
#include "ternary_pool.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#define TOKEN_TILE 32
#define PREFETCH_ROWS 16

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define Q8_ZMM 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define Q8_YMM 1
#endif

const char *kernel_name(void) {
#if defined(Q8_ZMM) && defined(__AVX512VNNI__)
    return "avx512-vnni";
#elif defined(Q8_ZMM)
    return "avx512";
#elif defined(Q8_YMM) && defined(__AVXVNNI__)
    return "avx2-vnni";
#elif defined(Q8_YMM)
    return "avx2";
#else
    return "c";
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

/* ==================================================================== exact fp32 path */
#if defined(__AVX512F__)
/* One uint32 word = 16 weights. Broadcast it, shift lane i right by 2i, and use the low 2 bits as a
   vpermilps index into a per-(row, group) table whose entry j is (j % 4 - 1) * s: lane i gets
   (code_i - 1) * s exactly (code 3 -> 2s, Q2_0's +2). Then FMA. */
static inline __m512 group_table(uint16_t h) {
    const __m512 base = _mm512_setr_ps(-1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2);
    return _mm512_mul_ps(base, _mm512_set1_ps(h2f(h)));
}

static inline __m512 weights16(uint32_t word, __m512 table) {
    const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    __m512i idx = _mm512_srlv_epi32(_mm512_set1_epi32((int)word), shifts);
    return _mm512_permutevar_ps(table, idx);  /* in-lane vpermilps: index bits 1:0 = the code */
}

/* R rows x T tokens register block over all K */
static inline __attribute__((always_inline)) void block_kernel(
    const float *x, const uint32_t *words, const uint16_t *scales, float *y,
    int64_t n0, int R, int64_t m0, int T, int64_t K, int64_t G, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    __m512 acc[4][4];
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < NG; g++) {
        __m512 tbl[4];
        for (int r = 0; r < R; r++) tbl[r] = group_table(scales[(n0 + r) * NG + g]);
        for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
            __m512 xv[4];
            for (int t = 0; t < T; t++) xv[t] = _mm512_loadu_ps(x + (m0 + t) * K + c * 16);
            for (int r = 0; r < R; r++) {
                __m512 w = weights16(words[(n0 + r) * KC + c], tbl[r]);
                for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(w, xv[t], acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++)
        y[(m0 + t) * ldy + n0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* decode: one token, R rows, two accumulators per row (even/odd words) to hide FMA latency */
static inline __attribute__((always_inline)) void rows_kernel(
    const float *x, const uint32_t *words, const uint16_t *scales, float *y,
    int64_t n0, int R, int64_t K, int64_t G, int64_t M, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    for (int64_t m = 0; m < M; m++) {
        const float *xm = x + m * K;
        __m512 a0[4], a1[4];
        for (int r = 0; r < R; r++) { a0[r] = _mm512_setzero_ps(); a1[r] = _mm512_setzero_ps(); }
        for (int64_t g = 0; g < NG; g++) {
            __m512 tbl[4];
            for (int r = 0; r < R; r++) tbl[r] = group_table(scales[(n0 + r) * NG + g]);
            if ((g & 1) == 0)  /* software prefetch 16 rows ahead: -30 % time on the 2-core EPYC */
                for (int r = 0; r < R; r++)
                    __builtin_prefetch((const void *)((uintptr_t)words +
                                       (uintptr_t)(((n0 + PREFETCH_ROWS + r) * KC + g * CPG) * 4)), 0, 0);
            int64_t c = g * CPG;
            for (; c + 2 <= (g + 1) * CPG; c += 2) {
                __m512 x0 = _mm512_loadu_ps(xm + c * 16), x1 = _mm512_loadu_ps(xm + c * 16 + 16);
                __asm__("" : "+v"(x0), "+v"(x1)); /* keep x in registers instead of 8 memory operands */
                for (int r = 0; r < R; r++) {
                    const uint32_t *wr = words + (n0 + r) * KC + c;
                    a0[r] = _mm512_fmadd_ps(weights16(wr[0], tbl[r]), x0, a0[r]);
                    a1[r] = _mm512_fmadd_ps(weights16(wr[1], tbl[r]), x1, a1[r]);
                }
            }
            if (c < (g + 1) * CPG) {  /* group of 16 weights: an odd word count */
                __m512 x0 = _mm512_loadu_ps(xm + c * 16);
                for (int r = 0; r < R; r++)
                    a0[r] = _mm512_fmadd_ps(weights16(words[(n0 + r) * KC + c], tbl[r]), x0, a0[r]);
            }
        }
        for (int r = 0; r < R; r++) y[m * ldy + n0 + r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
    }
}

#elif defined(__AVX2__) && defined(__FMA__)
/* AVX2: 16 weights = two 8-lane halves */
static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 group_table(uint16_t h) {
    return _mm256_mul_ps(_mm256_setr_ps(-1, 0, 1, 2, -1, 0, 1, 2), _mm256_set1_ps(h2f(h)));
}

static inline __attribute__((always_inline)) void block_kernel(
    const float *x, const uint32_t *words, const uint16_t *scales, float *y,
    int64_t n0, int R, int64_t m0, int T, int64_t K, int64_t G, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    const __m256i sh_lo = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i sh_hi = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
    __m256 acc[4][4];
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < NG; g++) {
        __m256 tbl[4];
        for (int r = 0; r < R; r++) tbl[r] = group_table(scales[(n0 + r) * NG + g]);
        if (T == 1 && (g & 1) == 0)  /* decode streams the weights: prefetch as in the AVX-512 path */
            for (int r = 0; r < R; r++)
                __builtin_prefetch((const void *)((uintptr_t)words +
                                   (uintptr_t)(((n0 + PREFETCH_ROWS + r) * KC + g * CPG) * 4)), 0, 0);
        for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
            for (int half = 0; half < 2; half++) {
                __m256 xv[4];
                for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps(x + (m0 + t) * K + c * 16 + half * 8);
                for (int r = 0; r < R; r++) {
                    __m256i word = _mm256_set1_epi32((int)words[(n0 + r) * KC + c]);
                    __m256i idx = _mm256_srlv_epi32(word, half ? sh_hi : sh_lo);
                    __m256 w = _mm256_permutevar8x32_ps(tbl[r], idx);
                    for (int t = 0; t < T; t++) acc[r][t] = _mm256_fmadd_ps(w, xv[t], acc[r][t]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) y[(m0 + t) * ldy + n0 + r] = hsum256(acc[r][t]);
}

static inline __attribute__((always_inline)) void rows_kernel(
    const float *x, const uint32_t *words, const uint16_t *scales, float *y,
    int64_t n0, int R, int64_t K, int64_t G, int64_t M, int64_t ldy) {
    for (int64_t m = 0; m < M; m++) block_kernel(x, words, scales, y, n0, R, m, 1, K, G, ldy);
}

#else
/* portable C */
static void block_kernel(const float *x, const uint32_t *words, const uint16_t *scales, float *y,
                         int64_t n0, int R, int64_t m0, int T, int64_t K, int64_t G, int64_t ldy) {
    tc_ternary_mm_ref(x, words, scales, y, m0, m0 + T, n0, n0 + R, K, G, ldy);
}

static void rows_kernel(const float *x, const uint32_t *words, const uint16_t *scales, float *y,
                        int64_t n0, int R, int64_t K, int64_t G, int64_t M, int64_t ldy) {
    tc_ternary_mm_ref(x, words, scales, y, 0, M, n0, n0 + R, K, G, ldy);
}
#endif

static void block_range(const float *x, const uint32_t *words, const uint16_t *scales, float *y,
                        int64_t n0, int R, int64_t m0, int64_t m1, int64_t K, int64_t G, int64_t ldy) {
    int64_t m = m0;
    if (R == 4) {
        for (; m + 4 <= m1; m += 4) block_kernel(x, words, scales, y, n0, 4, m, 4, K, G, ldy);
        for (; m < m1; m++) block_kernel(x, words, scales, y, n0, 4, m, 1, K, G, ldy);
    } else {
        for (; m + 4 <= m1; m += 4) block_kernel(x, words, scales, y, n0, 1, m, 4, K, G, ldy);
        for (; m < m1; m++) block_kernel(x, words, scales, y, n0, 1, m, 1, K, G, ldy);
    }
}

/* row blocks [i0, i1) of 4 rows; the last block also takes the N % 4 leftover rows */
static void mm_decode_job(const void *ctx, int64_t i0, int64_t i1) {
    const tc_mm_args *a = (const tc_mm_args *)ctx;
    for (int64_t b = i0; b < i1; b++)
        rows_kernel(a->x, a->words, a->scales, a->y, b * 4, 4, a->K, a->G, a->M, a->ldy);
    if (i1 * 4 + 4 > a->N)
        for (int64_t n = i1 * 4; n < a->N; n++) rows_kernel(a->x, a->words, a->scales, a->y, n, 1, a->K, a->G, a->M, a->ldy);
}

static void mm_prefill_job(const void *ctx, int64_t i0, int64_t i1) {
    const tc_mm_args *a = (const tc_mm_args *)ctx;
    for (int64_t b = i0; b < i1; b++)
        block_range(a->x, a->words, a->scales, a->y, b * 4, 4, a->m0, a->m1, a->K, a->G, a->ldy);
    if (i1 * 4 + 4 > a->N)
        for (int64_t n = i1 * 4; n < a->N; n++)
            block_range(a->x, a->words, a->scales, a->y, n, 1, a->m0, a->m1, a->K, a->G, a->ldy);
}

/* y[m, n] (row stride ldy) = sum_k x[m, k] * w[n, k]; K and G multiples of 16, G divides K. */
void ternary_mm(const float *x, const uint32_t *words, const uint16_t *scales, float *y,
                int64_t M, int64_t N, int64_t K, int64_t G, int64_t ldy, int nthreads) {
    tc_mm_args a = {.x = x, .words = words, .scales = scales, .y = y, .M = M, .N = N, .K = K, .G = G, .ldy = ldy,
                    .m1 = M};
    const int64_t nb = N / 4;
    if (nb == 0) {  /* fewer than 4 rows */
        for (int64_t n = 0; n < N; n++) block_range(x, words, scales, y, n, 1, 0, M, K, G, ldy);
        return;
    }
    if (M < 4) {
        tp_run(mm_decode_job, &a, nb, nthreads);
        return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += TOKEN_TILE) {
        a.m0 = m0;
        a.m1 = m0 + TOKEN_TILE < M ? m0 + TOKEN_TILE : M;
        tp_run(mm_prefill_job, &a, nb, nthreads);
    }
}

/* Embedding gather straight from the t2 codes: out[i, :] = row ids[i] of W, exact. */
void ternary_rows(const int64_t *ids, int64_t count, const uint32_t *words, const uint16_t *scales,
                  float *out, int64_t K, int64_t G) {
    tc_ternary_rows_ref(ids, count, words, scales, out, K, G);
}

/* ==================================================================== int8 activations: quantize */
#if defined(Q8_ZMM)
/* roundf (half away from zero) of integer-or-not floats: trunc, then +-1 where |frac| >= 0.5. The
   fraction v - trunc(v) is exact, so this equals roundf bit for bit (adding 0.5 first would not). */
static inline __m512 round_away(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_abs_ps(_mm512_sub_ps(v, t));
    const __mmask16 up = _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 one = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(_mm512_set1_ps(1.0f)),
        _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u))));
    return _mm512_mask_add_ps(t, up, t, one);
}

static void quantize_rows(const float *x, int64_t m0, int64_t m1, int64_t K, int8_t *q, float *d,
                          int32_t *qsum) {
    const int64_t NB = K / TC_QBLOCK;
    for (int64_t m = m0; m < m1; m++) {
        for (int64_t b = 0; b < NB; b++) {
            const float *xb = x + m * K + b * TC_QBLOCK;
            const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
            const float dd = amax / 127.0f;
            const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
            const __m512 vid = _mm512_set1_ps(id);
            const __m512i i0 = _mm512_cvtps_epi32(round_away(_mm512_mul_ps(x0, vid)));
            const __m512i i1 = _mm512_cvtps_epi32(round_away(_mm512_mul_ps(x1, vid)));
            _mm_storeu_si128((__m128i *)(q + m * K + b * TC_QBLOCK), _mm512_cvtepi32_epi8(i0));
            _mm_storeu_si128((__m128i *)(q + m * K + b * TC_QBLOCK + 16), _mm512_cvtepi32_epi8(i1));
            d[m * NB + b] = dd;
            qsum[m * NB + b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
        }
    }
}
#elif defined(Q8_YMM)
static inline __m256 round_away(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 f = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 up = _mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign));
    return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

static void quantize_rows(const float *x, int64_t m0, int64_t m1, int64_t K, int8_t *q, float *d,
                          int32_t *qsum) {
    const int64_t NB = K / TC_QBLOCK;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t m = m0; m < m1; m++) {
        for (int64_t b = 0; b < NB; b++) {
            const float *xb = x + m * K + b * TC_QBLOCK;
            __m256 v[4];
            __m256 amax = _mm256_setzero_ps();
            for (int i = 0; i < 4; i++) {
                v[i] = _mm256_loadu_ps(xb + 8 * i);
                amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
            }
            __m128 a = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
            a = _mm_max_ps(a, _mm_movehl_ps(a, a));
            a = _mm_max_ss(a, _mm_movehdup_ps(a));
            const float dd = _mm_cvtss_f32(a) / 127.0f;
            const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
            __m256i iv[4];
            for (int i = 0; i < 4; i++)
                iv[i] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[i], _mm256_set1_ps(id))));
            const __m256i s = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
            const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
            _mm256_storeu_si256((__m256i *)(q + m * K + b * TC_QBLOCK),
                                _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
            d[m * NB + b] = dd;
            qsum[m * NB + b] = _mm_cvtsi128_si32(s4);
        }
    }
}
#else
static void quantize_rows(const float *x, int64_t m0, int64_t m1, int64_t K, int8_t *q, float *d,
                          int32_t *qsum) {
    tc_quantize_q8_ref(x, m0, m1, K, q, d, qsum);
}
#endif

void quantize_q8(const float *x, int64_t M, int64_t K, int8_t *q, float *d, int32_t *qsum) {
    quantize_rows(x, 0, M, K, q, d, qsum);
}

/* ==================================================================== int8 activations: matmul */
#if defined(Q8_ZMM) || defined(Q8_YMM)

#if defined(Q8_ZMM)
#define VW 16  /* int32 lanes per vector */
typedef __m512i vi_t;
typedef __m512 vf_t;
#define VI_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define VI_AND _mm512_and_si512
#define VI_SRL16 _mm512_srli_epi16
#define VI_SET1_8 _mm512_set1_epi8
#define VF_CVT _mm512_cvtepi32_ps
#define VF_MUL _mm512_mul_ps
#define VF_FMA _mm512_fmadd_ps
#define VF_LOAD _mm512_loadu_ps
#define VF_STORE _mm512_storeu_ps
#define VF_ZERO _mm512_setzero_ps
#define VF_SET1 _mm512_set1_ps
#define VF_HSUM _mm512_reduce_add_ps
#define VF_FNMADD _mm512_fnmadd_ps
#define VF_FMSUB _mm512_fmsub_ps
#define VF_LOAD_HALF(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#if defined(__AVX512VNNI__)
#define DPBUSD _mm512_dpbusd_epi32
#else
#define MADDUBS _mm512_maddubs_epi16
#define ADD16 _mm512_add_epi16
#define MADDWD _mm512_madd_epi16
#define ADD32 _mm512_add_epi32
#define SET1_16 _mm512_set1_epi16
#endif
#else
#define VW 8
typedef __m256i vi_t;
typedef __m256 vf_t;
#define VI_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define VI_AND _mm256_and_si256
#define VI_SRL16 _mm256_srli_epi16
#define VI_SET1_8 _mm256_set1_epi8
#define VF_CVT _mm256_cvtepi32_ps
#define VF_MUL _mm256_mul_ps
#define VF_FMA _mm256_fmadd_ps
#define VF_LOAD _mm256_loadu_ps
#define VF_STORE _mm256_storeu_ps
#define VF_ZERO _mm256_setzero_ps
#define VF_SET1 _mm256_set1_ps
#define VF_HSUM hsum256
#define VF_FNMADD _mm256_fnmadd_ps
#define VF_FMSUB _mm256_fmsub_ps
#define VF_LOAD_HALF(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#if defined(__AVXVNNI__)
#define DPBUSD _mm256_dpbusd_avx_epi32
#else
#define MADDUBS _mm256_maddubs_epi16
#define ADD16 _mm256_add_epi16
#define MADDWD _mm256_madd_epi16
#define ADD32 _mm256_add_epi32
#define SET1_16 _mm256_set1_epi16
#endif
#endif

#define CW (VW * 16)        /* weights per chunk: 4 planes of VW*4 bytes */
#define PB (CW + 8 * VW)    /* prepared bytes per (token, chunk): planes, d per lane, -qsum per lane */
#ifndef Q8_R
#define Q8_R 4              /* rows per block, prefill (T tokens x R rows tiles) */
#endif
#ifndef Q8_RD
#define Q8_RD 1             /* rows per block, decode (fewer than Q8_TP tokens): one row after another, so
                               the weights stream in address order; 8 interleaved rows (8 strided streams)
                               read at 17 GB/s where one row at a time reads at 26 (2-core EPYC, all 197
                               mat-vecs of a 1.7B token: 26 -> 18 ms, AVX-512 and AVX2 alike) */
#endif
#ifndef Q8_PREFETCH_ROWS
#define Q8_PREFETCH_ROWS 4  /* decode: software prefetch this many rows ahead */
#endif
#ifndef Q8_TP
#define Q8_TP 4             /* tokens per tile, prefill (at most 6) */
#endif

/* sum over the 4 planes of code * q (exact int32): with VNNI added to pc's per-lane -qsum, so the result
   is the dot with code - 1; without VNNI the plain code dot (QSUM_IN_FLOAT: the qsum term is subtracted in
   fp32 instead of by an int32 add per chunk. Prompt tiles subtract sum_g s[g] * corr[g] at the end of
   q8_tile, one fused multiply-add per 8 or 16 groups: -10 % time on the AVX2 prefill matmul of the 2-core
   EPYC. One-token tiles fold it into the chunk's scaling, d * dot - d * qsum as one FMSUB with the per-lane
   d * qsum that prep_q8 stores: -3 to -5 % time on AVX2 decode mat-vecs there (same-process A/B, 8B and
   1.7B shapes), where the same fold costs prompt tiles +3 % (one more load per token and row)) */
#if defined(DPBUSD)
static inline vi_t dot4(const uint8_t *pc, vi_t a0, vi_t a1, vi_t a2, vi_t a3, const uint8_t *qp) {
    vi_t acc = VI_LOAD(pc + CW + 4 * VW);
    acc = DPBUSD(acc, a0, VI_LOAD(qp));
    acc = DPBUSD(acc, a1, VI_LOAD(qp + 4 * VW));
    acc = DPBUSD(acc, a2, VI_LOAD(qp + 8 * VW));
    return DPBUSD(acc, a3, VI_LOAD(qp + 12 * VW));
}
#else
#define QSUM_IN_FLOAT 1
static inline vi_t dot4(const uint8_t *pc, vi_t a0, vi_t a1, vi_t a2, vi_t a3, const uint8_t *qp) {
    (void)pc;  /* u8 x s8 pairs -> int16 (|sum| <= 4 * 762, no saturation) -> int32 */
    vi_t s = ADD16(MADDUBS(a0, VI_LOAD(qp)), MADDUBS(a1, VI_LOAD(qp + 4 * VW)));
    s = ADD16(s, ADD16(MADDUBS(a2, VI_LOAD(qp + 8 * VW)), MADDUBS(a3, VI_LOAD(qp + 12 * VW))));
    return MADDWD(s, SET1_16(1));
}
#endif

/* scale per int32 lane for chunk c of one row: lane L is in 32-block L/2 of the chunk, so in group
   (L/2)*32/G of it; idx holds those group offsets (used when a chunk spans several groups) */
static inline vf_t scale_vec(const uint16_t *srow, int64_t c, int64_t G, vi_t idx) {
    if (G >= CW) return VF_SET1(h2f(srow[c * CW / G]));
    const uint16_t *s = srow + c * (CW / G);
    __m128i h;
    if (G * 2 == CW) {
        uint32_t v;
        memcpy(&v, s, 4);
        h = _mm_cvtsi32_si128((int)v);
    } else if (G * 4 == CW) {
        h = _mm_loadl_epi64((const __m128i *)s);
    } else {
        h = _mm_loadu_si128((const __m128i *)s);
    }
#if defined(Q8_ZMM)
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(_mm256_cvtph_ps(h)));
#else
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(h)), idx);
#endif
}

/* CW activations -> 4 planes of CW/4 bytes, byte j of plane p = q[4j + p]: within each 16-byte lane a
   pshufb gathers every 4th byte into dwords, then dwords are regrouped across lanes */
static inline void transpose_planes(const int8_t *qc, uint8_t *out) {
#if defined(Q8_ZMM)
    const __m512i gather4 = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    __m512i S[4];
    for (int u = 0; u < 4; u++) S[u] = _mm512_shuffle_epi8(_mm512_loadu_si512((const void *)(qc + 64 * u)), gather4);
    /* plane p dword 4u + t = S[u] dword 4t + p; first pairs of u, two planes per vector */
    const __m512i i01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i i23 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    const __m512i x01 = _mm512_permutex2var_epi32(S[0], i01, S[1]), x23 = _mm512_permutex2var_epi32(S[0], i23, S[1]);
    const __m512i y01 = _mm512_permutex2var_epi32(S[2], i01, S[3]), y23 = _mm512_permutex2var_epi32(S[2], i23, S[3]);
    _mm512_storeu_si512((void *)(out + 0), _mm512_shuffle_i64x2(x01, y01, 0x44));
    _mm512_storeu_si512((void *)(out + 64), _mm512_shuffle_i64x2(x01, y01, 0xEE));
    _mm512_storeu_si512((void *)(out + 128), _mm512_shuffle_i64x2(x23, y23, 0x44));
    _mm512_storeu_si512((void *)(out + 192), _mm512_shuffle_i64x2(x23, y23, 0xEE));
#else
    const __m256i gather4 = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                             0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m256i S[4];
    for (int u = 0; u < 4; u++) S[u] = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(qc + 32 * u)), gather4);
    /* plane p dword 2u + t = S[u] dword 4t + p: 4x4 dword transpose per lane, then interleave lanes */
    const __m256i t0 = _mm256_unpacklo_epi32(S[0], S[1]), t1 = _mm256_unpackhi_epi32(S[0], S[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(S[2], S[3]), t3 = _mm256_unpackhi_epi32(S[2], S[3]);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256((__m256i *)(out + 0), _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(t0, t2), order));
    _mm256_storeu_si256((__m256i *)(out + 32), _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(t0, t2), order));
    _mm256_storeu_si256((__m256i *)(out + 64), _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(t1, t3), order));
    _mm256_storeu_si256((__m256i *)(out + 96), _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(t1, t3), order));
#endif
}

/* int8 activations of rows m0..m1 -> per (token, chunk): planes (byte j of plane p = q[4j+p]), d and
   -qsum per int32 lane (lane L: block L/2; -qsum only in even lanes so each block counts once) */
static void prep_q8(const int8_t *q, const float *d, const int32_t *qsum, uint8_t *prep,
                    int64_t m0, int64_t m1, int64_t K, int64_t nck) {
    const int64_t NB = K / TC_QBLOCK;
    for (int64_t m = m0; m < m1; m++) {
        for (int64_t c = 0; c < nck; c++) {
            uint8_t *pc = prep + (m * nck + c) * PB;
            transpose_planes(q + m * K + c * CW, pc);
            float dv[VW];
#if defined(QSUM_IN_FLOAT)
            float init[VW];  /* d * qsum per lane (even lanes), for the one-token tile's fused subtract */
#else
            int32_t init[VW];
#endif
            for (int L = 0; L < VW; L++) {
                const int64_t b = m * NB + c * (CW / TC_QBLOCK) + L / 2;
                dv[L] = d[b];
#if defined(QSUM_IN_FLOAT)
                init[L] = (L & 1) ? 0.0f : d[b] * (float)qsum[b];
#else
                init[L] = (L & 1) ? 0 : -qsum[b];
#endif
            }
            memcpy(pc + CW, dv, sizeof dv);
            memcpy(pc + CW + 4 * VW, init, sizeof init);
        }
    }
}

#if defined(QSUM_IN_FLOAT)
/* corr[m * NG + g] (tokens m0..m1) = sum of d * qsum over group g's blocks that the vector chunks cover
   (b < nck * CW / 32; the scalar tail_q8 does the rest exactly): what group g's code dots (codes 0..3)
   over-count against code - 1, before the group's weight scale */
static void q8_corrections(const float *d, const int32_t *qsum, int64_t m0, int64_t m1, int64_t K, int64_t G,
                           int64_t nck, float *corr) {
    const int64_t NB = K / TC_QBLOCK, NG = K / G, BPG = G / TC_QBLOCK, b0 = nck * CW / TC_QBLOCK;
    for (int64_t m = m0; m < m1; m++)
        for (int64_t g = 0; g < NG; g++) {
            float c = 0.0f;
            for (int64_t b = g * BPG; b < (g + 1) * BPG && b < b0; b++) c += d[m * NB + b] * (float)qsum[m * NB + b];
            corr[m * NG + g] = c;
        }
}
#endif

/* the K % CW tail of one (token, row): scalar, exact int32 per block */
static float tail_q8(const int8_t *q, const float *d, const int32_t *qsum, const uint32_t *wrow,
                     const uint16_t *srow, int64_t m, int64_t b0, int64_t K, int64_t G) {
    const int64_t NB = K / TC_QBLOCK;
    float total = 0.0f;
    for (int64_t b = b0; b < NB; b++)
        total += h2f(srow[b * TC_QBLOCK / G]) * d[m * NB + b] *
                 (float)tc_block_dot_ref(q + m * K + b * TC_QBLOCK, wrow + b * 2, qsum[m * NB + b]);
    return total;
}

typedef struct {
    const int8_t *q;
    const float *d;
    const int32_t *qsum;
    const uint8_t *prep;
    const float *corr;  /* QSUM_IN_FLOAT: [M, NG] from q8_corrections */
    const uint32_t *words;
    const uint16_t *scales;
    float *y;
    int64_t K, G, NG, KC, nck, ldy, N, M, m0, m1;
    vi_t sidx;
    int sshift;  /* G >= CW: chunk c's scale is group c >> sshift; -1: G / CW is no power of two */
    int smode;   /* how q8_tile gets a chunk's scales: SCALE_F16 or SCALE_BCAST */
} q8_args;

/* q8_tile's scale modes: convert the fp16 scales per chunk (scale_vec), or, where G >= CW is a power-of-two
   multiple of CW, once per row (row_scales) and then broadcast one per chunk. Where G < CW, a permute of
   row_scales' fp32 copy measured slower than scale_vec (AVX-512 decode, 2-core EPYC: 3.60 vs 3.46 ms per
   7 layers' mat-vecs), so those keep scale_vec. */
enum { SCALE_F16, SCALE_BCAST };

#define Q8_SF_MAX 512  /* groups per row that q8_tile converts to fp32 up front (on its stack) */

/* a row's NG fp16 scales -> fp32 (VW per conversion), so that a chunk's scale costs one broadcast load
   instead of a scalar conversion per chunk and row: -10 % time for the AVX2 decode mat-vecs of the 2-core
   EPYC (7 layers of the 1.7B: 3.2 -> 2.9 ms), -3.5 % for its prefill */
static inline void row_scales(const uint16_t *srow, int64_t NG, float *sf) {
    int64_t g = 0;
    for (; g + VW <= NG; g += VW) VF_STORE(sf + g, VF_LOAD_HALF(srow + g));
    for (; g < NG; g++) sf[g] = h2f(srow[g]);
}



/* R rows x T tokens register tile over all of K: each row's planes are unpacked once per chunk and
   used for all T tokens */
static inline __attribute__((always_inline)) void q8_tile(const q8_args *a, int64_t n0, const int R,
                                                         int64_t m0, const int T, const int prefetch,
                                                         const int smode) {
    const int64_t pstride = a->nck * PB;
    const vi_t m3 = VI_SET1_8(3);
    vf_t acc[8][8];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[r][t] = VF_ZERO();
    /* sized by R: a fixed-size [4][...] array made the AVX2 prefill tile 15 % slower (gcc 12: stack layout) */
    float sf[R][smode == SCALE_BCAST ? Q8_SF_MAX : 1];
    if (smode == SCALE_BCAST)
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) row_scales(a->scales + (n0 + r) * a->NG, a->NG, sf[r]);
    for (int64_t c = 0; c < a->nck; c++) {
        const uint8_t *pc = a->prep + m0 * pstride + c * PB;
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const uint8_t *wc = (const uint8_t *)(a->words + (n0 + r) * a->KC) + c * (CW / 4);
            if (prefetch) __builtin_prefetch(wc + Q8_PREFETCH_ROWS * a->KC * 4, 0, 0);
            const vi_t w = VI_LOAD(wc);
            const vi_t p0 = VI_AND(w, m3), p1 = VI_AND(VI_SRL16(w, 2), m3);
            const vi_t p2 = VI_AND(VI_SRL16(w, 4), m3), p3 = VI_AND(VI_SRL16(w, 6), m3);
            const vf_t sv = smode == SCALE_BCAST ? VF_SET1(sf[r][c >> a->sshift])
                                                 : scale_vec(a->scales + (n0 + r) * a->NG, c, a->G, a->sidx);
            #pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const uint8_t *pt = pc + t * pstride;
                const vi_t dot = dot4(pt, p0, p1, p2, p3, pt);
#if defined(QSUM_IN_FLOAT)
                const vf_t dv = VF_LOAD((const float *)(pt + CW));
                const vf_t v = T == 1 ? VF_FMSUB(VF_CVT(dot), dv, VF_LOAD((const float *)(pt + CW + 4 * VW)))
                                      : VF_MUL(VF_CVT(dot), dv);  /* see dot4 */
                acc[r][t] = VF_FMA(v, sv, acc[r][t]);
#else
                acc[r][t] = VF_FMA(VF_MUL(VF_CVT(dot), VF_LOAD((const float *)(pt + CW))), sv, acc[r][t]);
#endif
            }
        }
    }
    const int64_t b0 = a->nck * CW / TC_QBLOCK;
#if defined(QSUM_IN_FLOAT)
    /* prompt tiles subtract sum_g s[g] * corr[g] here, VW groups per step, the rest in the scalar loop below;
       one-token tiles did it per chunk (dot4), so for them every group is done */
    const int64_t NGV = T == 1 ? a->NG : a->NG / VW * VW;
    if (T > 1) {
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            for (int64_t g = 0; g < NGV; g += VW) {
                const vf_t s = VF_LOAD_HALF(a->scales + (n0 + r) * a->NG + g);
                #pragma GCC unroll 8
                for (int t = 0; t < T; t++)
                    acc[r][t] = VF_FNMADD(s, VF_LOAD(a->corr + (m0 + t) * a->NG + g), acc[r][t]);
            }
    }
#endif
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            float v = VF_HSUM(acc[r][t]);
#if defined(QSUM_IN_FLOAT)
            for (int64_t g = NGV; g < a->NG; g++)
                v -= h2f(a->scales[(n0 + r) * a->NG + g]) * a->corr[(m0 + t) * a->NG + g];
#endif
            if (b0 < a->K / TC_QBLOCK)
                v += tail_q8(a->q, a->d, a->qsum, a->words + (n0 + r) * a->KC, a->scales + (n0 + r) * a->NG,
                             m0 + t, b0, a->K, a->G);
            a->y[(m0 + t) * a->ldy + n0 + r] = v;
        }
}

/* rows n0..n0+R-1 (R compile-time) for tokens m0..m1 */
static inline __attribute__((always_inline)) void q8_rows_mode(const q8_args *a, int64_t n0, const int R,
                                                              int64_t m0, int64_t m1, const int S) {
    int64_t m = m0;
    for (; m + Q8_TP <= m1; m += Q8_TP) q8_tile(a, n0, R, m, Q8_TP, 0, S);
    switch (m1 - m) {  /* the token tail (decode: M = 1) streams weights once: prefetch them */
    case 1: q8_tile(a, n0, R, m, 1, 1, S); break;
    case 2: q8_tile(a, n0, R, m, 2, 1, S); break;
    case 3: q8_tile(a, n0, R, m, 3, 1, S); break;
#if Q8_TP > 4
    case 4: q8_tile(a, n0, R, m, 4, 1, S); break;
    case 5: q8_tile(a, n0, R, m, 5, 1, S); break;
#endif
    default: break;
    }
}

static inline __attribute__((always_inline)) void q8_rows(const q8_args *a, int64_t n0, const int R,
                                                         int64_t m0, int64_t m1) {
    switch (a->smode) {  /* one specialised tile per mode: no per-chunk branch */
    case SCALE_BCAST: q8_rows_mode(a, n0, R, m0, m1, SCALE_BCAST); break;
    default: q8_rows_mode(a, n0, R, m0, m1, SCALE_F16); break;
    }
}

/* row blocks [i0, i1) of Q8_RD (decode) or Q8_R rows for tokens m0..m1; the last block may be partial */
static void q8_job(const void *ctx, int64_t i0, int64_t i1) {
    const q8_args *a = (const q8_args *)ctx;
    const int decode = a->M < Q8_TP, R = decode ? Q8_RD : Q8_R;
    for (int64_t b = i0; b < i1; b++) {
        if ((b + 1) * R > a->N)
            for (int64_t n = b * R; n < a->N; n++) q8_rows(a, n, 1, a->m0, a->m1);
        else if (decode)
            q8_rows(a, b * Q8_RD, Q8_RD, a->m0, a->m1);
        else
            q8_rows(a, b * Q8_R, Q8_R, a->m0, a->m1);
    }
}

static int q8_vector_ok(int64_t K, int64_t G) {
    return K >= CW && G % TC_QBLOCK == 0 && (G >= CW ? G % CW == 0 : CW % G == 0);
}

/* everything of q8_args but prep and the token range m0..m1 (also used by ternary_decode.h) */
static void q8_args_init(q8_args *a, const int8_t *q, const float *d, const int32_t *qsum, const uint32_t *words,
                         const uint16_t *scales, float *y, int64_t M, int64_t N, int64_t K, int64_t G, int64_t ldy) {
    memset(a, 0, sizeof *a);
    a->q = q; a->d = d; a->qsum = qsum; a->words = words; a->scales = scales; a->y = y;
    a->K = K; a->G = G; a->NG = K / G; a->KC = K / 16; a->nck = K / CW; a->ldy = ldy; a->N = N; a->M = M;
    int32_t idx[VW];
    for (int L = 0; L < VW; L++) idx[L] = G < CW ? (int32_t)(L * 16 / G) : 0;
    memcpy(&a->sidx, idx, sizeof idx);
    a->sshift = -1;
    for (int sh = 0; G >= CW && sh < 31; sh++)
        if ((int64_t)CW << sh == G) a->sshift = sh;
    a->smode = a->NG <= Q8_SF_MAX && a->sshift >= 0 ? SCALE_BCAST : SCALE_F16;
}

/* the prepared activations (and QSUM_IN_FLOAT's corrections) of tokens m0..m1 */
static void prep_tokens(const q8_args *a, int64_t m0, int64_t m1) {
    prep_q8(a->q, a->d, a->qsum, (uint8_t *)a->prep, m0, m1, a->K, a->nck);
#if defined(QSUM_IN_FLOAT)
    q8_corrections(a->d, a->qsum, m0, m1, a->K, a->G, a->nck, (float *)a->corr);
#endif
}

static void q8_matmul(const int8_t *q, const float *d, const int32_t *qsum, const uint32_t *words,
                      const uint16_t *scales, float *y, int64_t M, int64_t N, int64_t K, int64_t G,
                      int64_t ldy, int nthreads) {
    q8_args a;
    q8_args_init(&a, q, d, qsum, words, scales, y, M, N, K, G, ldy);
    const int64_t pstride = a.nck * PB, prep_bytes = (M * pstride + 63) / 64 * 64;
    uint8_t *prep = (uint8_t *)aligned_alloc(64, (size_t)((prep_bytes + M * a.NG * 4 + 63) / 64 * 64));
    if (!prep) {  /* out of memory for the prepared activations: the scalar path needs none */
        tc_ternary_mm_q8_ref(q, d, qsum, words, scales, y, 0, M, 0, N, K, G, ldy);
        return;
    }
    a.prep = prep;
#if defined(QSUM_IN_FLOAT)
    a.corr = (const float *)(prep + prep_bytes);
#endif
    prep_tokens(&a, 0, M);
    /* tokens per pass over the weights: their prepared activations (~1.5 bytes each) stay in L2 */
    int64_t mb = (256 * 1024) / (pstride > 0 ? pstride : 1);
    mb = mb < Q8_TP ? Q8_TP : mb / Q8_TP * Q8_TP;
    for (a.m0 = 0; a.m0 < M; a.m0 += mb) {
        a.m1 = a.m0 + mb < M ? a.m0 + mb : M;
        const int64_t R = M < Q8_TP ? Q8_RD : Q8_R;
        tp_run(q8_job, &a, (N + R - 1) / R, nthreads);
    }
    free(prep);
}
#endif

static void q8_ref_job(const void *ctx, int64_t i0, int64_t i1) {
    const tc_mm_args *a = (const tc_mm_args *)ctx;
    const int64_t n1 = i1 * 16 < a->N ? i1 * 16 : a->N;
    tc_ternary_mm_q8_ref(a->q, a->d, a->qsum, a->words, a->scales, a->y, 0, a->M, i0 * 16, n1, a->K, a->G, a->ldy);
}

/* y[m, n] (row stride ldy) from int8 activations (quantize_q8) and the t2 codes; K, G multiples of 32 */
void ternary_mm_q8(const int8_t *q, const float *d, const int32_t *qsum,
                   const uint32_t *words, const uint16_t *scales, float *y,
                   int64_t M, int64_t N, int64_t K, int64_t G, int64_t ldy, int nthreads) {
#if defined(Q8_ZMM) || defined(Q8_YMM)
    if (q8_vector_ok(K, G)) {
        q8_matmul(q, d, qsum, words, scales, y, M, N, K, G, ldy, nthreads);
        return;
    }
#endif
    const tc_mm_args a = {.q = q, .d = d, .qsum = qsum, .words = words, .scales = scales, .y = y, .M = M, .N = N,
                          .K = K, .G = G, .ldy = ldy};
    tp_run(q8_ref_job, &a, (N + 15) / 16, nthreads);
}

#include "ternary_decode.h"  /* the fused decode step, over the kernels above */
