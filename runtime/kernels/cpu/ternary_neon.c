/* ARM64 NEON kernels for the CPU backend "cpu_ternary" (Apple silicon, ARM laptops and servers).

   Same API and results as ternary_x86.c (see ternary_common.h for the layout and the rules):
   - exact path: every weight is materialised as exactly (code - 1) * s in fp32 and multiplied with
     vfmaq_f32, so the result equals a dense fp32 matmul on the exact weights up to summation order;
   - int8 path: activations quantised per 32 values (bit-identical to tc_quantize_q8_ref: true
     division, vcvtaq rounds half away from zero like roundf), then the unsigned codes (0..3), split
     into byte planes by shifts, are multiplied with sdot (vdotq_s32) when the compiler targets the
     dot-product extension, else with vmull_s8 + vpaddq_s16 + vpadalq_s16 (same int32 lanes, so both
     builds give the same bits); the exact int32 block dot is sum(q * code) - qsum.

   No one here has ARM hardware: tests/cpu/test_cpu_neon_qemu.py cross-compiles this file and checks it
   under qemu-user, with and without the dot-product extension.

   Threads: ternary_pool.h, as on x86. Why not OpenMP: Apple clang has none (this file was then built
   single-threaded on every Mac), and an OpenMP barrier stalls on a core another process holds. */

#define _POSIX_C_SOURCE 200809L  /* clock_gettime, pthread_atfork under -std=c11 (ternary_pool.h) */

#include <arm_neon.h>

#include "ternary_common.h"
#include "ternary_pool.h"

#define TOKEN_TILE 32
#define PREFETCH_ROWS 16

const char *kernel_name(void) {
#if defined(__ARM_FEATURE_DOTPROD)
    return "neon-dotprod";
#else
    return "neon";
#endif
}

int kernel_isa(void) { return 128; }

/* ---------------------------------------------------------------- exact fp32 */

/* Lanes j*4 .. j*4+3 of a 16-weight word as exact fp32 weights: code * s - s is computed exactly by
   the fused multiply-add (code <= 3 and s has 11 significant bits), so it rounds to (code - 1) * s. */
static inline float32x4_t neon_weights4(uint32x4_t word, int32x4_t shift, float32x4_t s, float32x4_t neg_s) {
    const uint32x4_t code = vandq_u32(vshlq_u32(word, shift), vdupq_n_u32(3));
    return vfmaq_f32(neg_s, vcvtq_f32_u32(code), s);
}

/* R rows x T tokens register block over all of K (R, T <= 4: 16 accumulators). */
static inline __attribute__((always_inline)) void neon_block(
    const float *x, const uint32_t *words, const uint16_t *scales, float *y,
    int64_t n0, int R, int64_t m0, int T, int64_t K, int64_t G, int64_t ldy) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    const int32x4_t shifts[4] = {{0, -2, -4, -6}, {-8, -10, -12, -14},
                                 {-16, -18, -20, -22}, {-24, -26, -28, -30}};
    float32x4_t acc[4][4];
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) acc[r][t] = vdupq_n_f32(0.0f);
    for (int64_t g = 0; g < NG; g++) {
        float32x4_t s[4], neg_s[4];
        for (int r = 0; r < R; r++) {
            const float sc = h2f(scales[(n0 + r) * NG + g]);
            s[r] = vdupq_n_f32(sc);
            neg_s[r] = vdupq_n_f32(-sc);
        }
        if (T == 1 && (g & 1) == 0)  /* decode streams the weights: prefetch as the x86 kernels do */
            for (int r = 0; r < R; r++)
                __builtin_prefetch((const void *)((uintptr_t)words +
                                   (uintptr_t)(((n0 + PREFETCH_ROWS + r) * KC + g * CPG) * 4)), 0, 0);
        for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
            uint32x4_t wv[4];
            for (int r = 0; r < R; r++) wv[r] = vdupq_n_u32(words[(n0 + r) * KC + c]);
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {  /* unrolled: acc[r][t] must stay in registers */
                float32x4_t xv[4];
                for (int t = 0; t < T; t++) xv[t] = vld1q_f32(x + (m0 + t) * K + c * 16 + j * 4);
                #pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const float32x4_t w = neon_weights4(wv[r], shifts[j], s[r], neg_s[r]);
                    for (int t = 0; t < T; t++) acc[r][t] = vfmaq_f32(acc[r][t], w, xv[t]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) y[(m0 + t) * ldy + n0 + r] = vaddvq_f32(acc[r][t]);
}

/* tokens m0..m1 against R rows from n0: 4-token blocks, then single tokens. A 4-token block takes 2 rows
   at a time: 4 x 4 accumulators plus the rows' scales and words would not fit the 32 registers. */
static void neon_block_range(const float *x, const uint32_t *words, const uint16_t *scales, float *y,
                             int64_t n0, int R, int64_t m0, int64_t m1, int64_t K, int64_t G, int64_t ldy) {
    int64_t m = m0;
    if (R == 4) {
        for (; m + 4 <= m1; m += 4) {
            neon_block(x, words, scales, y, n0, 2, m, 4, K, G, ldy);
            neon_block(x, words, scales, y, n0 + 2, 2, m, 4, K, G, ldy);
        }
        for (; m < m1; m++) neon_block(x, words, scales, y, n0, 4, m, 1, K, G, ldy);
    } else {
        for (; m + 4 <= m1; m += 4) neon_block(x, words, scales, y, n0, 1, m, 4, K, G, ldy);
        for (; m < m1; m++) neon_block(x, words, scales, y, n0, 1, m, 1, K, G, ldy);
    }
}

/* 4-row blocks [i0, i1), tokens m0..m1 */
static void mm_job(const void *ctx, int64_t i0, int64_t i1) {
    const tc_mm_args *a = (const tc_mm_args *)ctx;
    for (int64_t b = i0; b < i1; b++)
        neon_block_range(a->x, a->words, a->scales, a->y, b * 4, 4, a->m0, a->m1, a->K, a->G, a->ldy);
}

/* y[m, n] (row stride ldy) = sum_k x[m, k] * w[n, k]; K and G multiples of 16, G divides K. */
void ternary_mm(const float *x, const uint32_t *words, const uint16_t *scales, float *y,
                int64_t M, int64_t N, int64_t K, int64_t G, int64_t ldy, int nthreads) {
    const int64_t nb = N / 4;
    tc_mm_args a = {.x = x, .words = words, .scales = scales, .y = y, .M = M, .N = N, .K = K, .G = G, .ldy = ldy};
    for (int64_t m0 = 0; m0 < M; m0 += TOKEN_TILE) {
        a.m0 = m0;
        a.m1 = m0 + TOKEN_TILE < M ? m0 + TOKEN_TILE : M;
        tp_run(mm_job, &a, nb, nthreads);
        for (int64_t n = nb * 4; n < N; n++) neon_block_range(x, words, scales, y, n, 1, a.m0, a.m1, K, G, ldy);
    }
}

/* Embedding gather straight from the t2 codes: out[i, :] = row ids[i] of W, exact. */
void ternary_rows(const int64_t *ids, int64_t count, const uint32_t *words, const uint16_t *scales,
                  float *out, int64_t K, int64_t G) {
    const int64_t KC = K / 16, NG = K / G, CPG = G / 16;
    const int32x4_t shifts[4] = {{0, -2, -4, -6}, {-8, -10, -12, -14},
                                 {-16, -18, -20, -22}, {-24, -26, -28, -30}};
    for (int64_t i = 0; i < count; i++) {
        const uint32_t *p = words + ids[i] * KC;
        float *o = out + i * K;
        for (int64_t g = 0; g < NG; g++) {
            const float sc = h2f(scales[ids[i] * NG + g]);
            const float32x4_t s = vdupq_n_f32(sc), neg_s = vdupq_n_f32(-sc);
            for (int64_t c = g * CPG; c < (g + 1) * CPG; c++) {
                const uint32x4_t wv = vdupq_n_u32(p[c]);
                for (int j = 0; j < 4; j++) vst1q_f32(o + c * 16 + j * 4, neon_weights4(wv, shifts[j], s, neg_s));
            }
        }
    }
}

/* ---------------------------------------------------------------- int8 activations */

/* x (M x K) -> q, d, qsum per 32-block, bit-identical to tc_quantize_q8_ref. */
void quantize_q8(const float *x, int64_t M, int64_t K, int8_t *q, float *d, int32_t *qsum) {
    const int64_t NB = K / TC_QBLOCK;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t b = 0; b < NB; b++) {
            const float *xb = x + m * K + b * TC_QBLOCK;
            float32x4_t v[8];
            float32x4_t amax4 = vdupq_n_f32(0.0f);
            for (int i = 0; i < 8; i++) {
                v[i] = vld1q_f32(xb + 4 * i);
                amax4 = vmaxq_f32(amax4, vabsq_f32(v[i]));
            }
            const float amax = vmaxvq_f32(amax4);
            const float dd = amax / 127.0f;
            const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
            int8x8_t q8[4];
            for (int i = 0; i < 4; i++) {
                /* vcvtaq: round to nearest, ties away from zero, as roundf; |x * id| <= 127 */
                const int32x4_t lo = vcvtaq_s32_f32(vmulq_n_f32(v[2 * i], id));
                const int32x4_t hi = vcvtaq_s32_f32(vmulq_n_f32(v[2 * i + 1], id));
                q8[i] = vqmovn_s16(vcombine_s16(vqmovn_s32(lo), vqmovn_s32(hi)));
            }
            const int8x16_t q0 = vcombine_s8(q8[0], q8[1]), q1 = vcombine_s8(q8[2], q8[3]);
            vst1q_s8(q + m * K + b * TC_QBLOCK, q0);
            vst1q_s8(q + m * K + b * TC_QBLOCK + 16, q1);
            d[m * NB + b] = dd;
            qsum[m * NB + b] = (int32_t)vaddlvq_s8(q0) + (int32_t)vaddlvq_s8(q1);
        }
    }
}

/* The 64 codes of 4 consecutive words of one row as 4 byte planes, two instructions per plane (why: the
   t2 layout puts weights 4i..4i+3 of a word in its byte i, so shifting every byte by 2p gives weight
   4i+p; no table lookups). Plane p, byte 4l+i = code of weight 4i+p of word l. vld4q_s8 on the 64
   activations of the same words gives exactly the matching order: val[p][4l+i] = q[16l+4i+p]. */
static inline void neon_planes(const uint32_t *w, int8x16_t pl[4]) {
    const uint8x16_t v = vld1q_u8((const uint8_t *)w), three = vdupq_n_u8(3);
    pl[0] = vreinterpretq_s8_u8(vandq_u8(v, three));
    pl[1] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(v, 2), three));
    pl[2] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(v, 4), three));
    pl[3] = vreinterpretq_s8_u8(vshrq_n_u8(v, 6));
}

/* acc lane l + sum of the products of bytes 4l..4l+3: sdot, or its ARMv8.0 equivalent with the same
   lanes (|code * q| <= 381, so two products fit int16 before the widening pairwise add) */
static inline int32x4_t neon_dot(int32x4_t acc, int8x16_t codes, int8x16_t q) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, codes, q);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(codes), vget_low_s8(q));
    const int16x8_t hi = vmull_high_s8(codes, q);
    return vpadalq_s16(acc, vpaddq_s16(lo, hi));
#endif
}

/* one word per lane: sum over 64 weights (4 words) of code * q, qa = vld4q_s8 of their activations */
static inline int32x4_t neon_dot64(const int8x16_t pl[4], int8x16x4_t qa) {
    int32x4_t acc = neon_dot(vdupq_n_s32(0), pl[0], qa.val[0]);
    acc = neon_dot(acc, pl[1], qa.val[1]);
    acc = neon_dot(acc, pl[2], qa.val[2]);
    return neon_dot(acc, pl[3], qa.val[3]);
}

/* R rows x T tokens, 128 weights (32-blocks b..b+3) per step; FULL = 0 is a K % 128 == 64 tail of
   blocks b, b+1. Per block the int32 dot is exact (lane pairs added, qsum subtracted) before it is
   scaled by d * s in fp32. Needs G % 64 == 0, so blocks b, b+1 (and b+2, b+3) share a scale. */
static inline __attribute__((always_inline)) void neon_step_q8(
    const int8_t *q, const float *d, const int32_t *qsum, const uint32_t *words, const uint16_t *scales,
    float32x4_t acc[4][2], int64_t b, int FULL, int64_t n0, int R, int64_t m0, int T, int64_t K, int64_t G) {
    const int64_t KC = K / 16, NG = K / G, NB = K / TC_QBLOCK, BPG = G / TC_QBLOCK;
    if (T == 1 && (b & 4) == 0)  /* decode streams the weights: one 64-byte line per row ahead */
        for (int r = 0; r < R; r++)
            __builtin_prefetch((const void *)((uintptr_t)words +
                               (uintptr_t)(((n0 + PREFETCH_ROWS + r) * KC + b * 2) * 4)), 0, 0);
    int8x16x4_t q1a = vld4q_s8(q + m0 * K + b * TC_QBLOCK), q1b = q1a;  /* decode: load once for R rows */
    if (T == 1 && FULL) q1b = vld4q_s8(q + m0 * K + b * TC_QBLOCK + 64);
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) {  /* unrolled: acc[r][t] must stay in registers */
        const uint32_t *wr = words + (n0 + r) * KC + b * 2;
        const uint16_t *sr = scales + (n0 + r) * NG;
        int8x16_t pa[4], pb[4];
        neon_planes(wr, pa);
        if (FULL) neon_planes(wr + 4, pb);
        const float32x4_t s = vcombine_f32(vdup_n_f32(h2f(sr[b / BPG])),
                                           vdup_n_f32(FULL ? h2f(sr[(b + 2) / BPG]) : 0.0f));
        #pragma GCC unroll 2
        for (int t = 0; t < T; t++) {
            const int8_t *qt = q + (m0 + t) * K + b * TC_QBLOCK;
            const float *dt = d + (m0 + t) * NB + b;
            const int32_t *st = qsum + (m0 + t) * NB + b;
            const int32x4_t ia = neon_dot64(pa, T == 1 ? q1a : vld4q_s8(qt));
            const int32x4_t ib = FULL ? neon_dot64(pb, T == 1 ? q1b : vld4q_s8(qt + 64)) : vdupq_n_s32(0);
            const int32x4_t qs = FULL ? vld1q_s32(st) : vcombine_s32(vld1_s32(st), vdup_n_s32(0));
            const float32x4_t dv = FULL ? vld1q_f32(dt) : vcombine_f32(vld1_f32(dt), vdup_n_f32(0.0f));
            const int32x4_t blocks = vsubq_s32(vpaddq_s32(ia, ib), qs);  /* exact dots of blocks b..b+3 */
            acc[r][t] = vfmaq_f32(acc[r][t], vcvtq_f32_s32(blocks), vmulq_f32(dv, s));
        }
    }
}

static inline __attribute__((always_inline)) void neon_block_q8(
    const int8_t *q, const float *d, const int32_t *qsum, const uint32_t *words, const uint16_t *scales,
    float *y, int64_t n0, int R, int64_t m0, int T, int64_t K, int64_t G, int64_t ldy) {
    const int64_t NB = K / TC_QBLOCK;
    float32x4_t acc[4][2];
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) acc[r][t] = vdupq_n_f32(0.0f);
    int64_t b = 0;
    for (; b + 4 <= NB; b += 4) neon_step_q8(q, d, qsum, words, scales, acc, b, 1, n0, R, m0, T, K, G);
    if (b < NB) neon_step_q8(q, d, qsum, words, scales, acc, b, 0, n0, R, m0, T, K, G);
    for (int r = 0; r < R; r++) for (int t = 0; t < T; t++) y[(m0 + t) * ldy + n0 + r] = vaddvq_f32(acc[r][t]);
}

/* tokens m0..m1 against R rows from n0: 2-token blocks of 2 rows (more spills the accumulators out of
   the 32 registers), then single tokens against all R rows */
static void neon_block_range_q8(const int8_t *q, const float *d, const int32_t *qsum, const uint32_t *words,
                                const uint16_t *scales, float *y, int64_t n0, int R, int64_t m0, int64_t m1,
                                int64_t K, int64_t G, int64_t ldy) {
    int64_t m = m0;
    if (R == 4) {
        for (; m + 2 <= m1; m += 2) {
            neon_block_q8(q, d, qsum, words, scales, y, n0, 2, m, 2, K, G, ldy);
            neon_block_q8(q, d, qsum, words, scales, y, n0 + 2, 2, m, 2, K, G, ldy);
        }
        for (; m < m1; m++) neon_block_q8(q, d, qsum, words, scales, y, n0, 4, m, 1, K, G, ldy);
    } else {
        for (; m + 2 <= m1; m += 2) neon_block_q8(q, d, qsum, words, scales, y, n0, 1, m, 2, K, G, ldy);
        for (; m < m1; m++) neon_block_q8(q, d, qsum, words, scales, y, n0, 1, m, 1, K, G, ldy);
    }
}

/* 4-row blocks [i0, i1) of the int8 path, tokens m0..m1 */
static void mm_q8_job(const void *ctx, int64_t i0, int64_t i1) {
    const tc_mm_args *a = (const tc_mm_args *)ctx;
    for (int64_t b = i0; b < i1; b++)
        neon_block_range_q8(a->q, a->d, a->qsum, a->words, a->scales, a->y, b * 4, 4, a->m0, a->m1, a->K, a->G,
                            a->ldy);
}

/* rows [i0, i1) through the scalar reference (G = 32), all tokens */
static void mm_q8_ref_job(const void *ctx, int64_t i0, int64_t i1) {
    const tc_mm_args *a = (const tc_mm_args *)ctx;
    tc_ternary_mm_q8_ref(a->q, a->d, a->qsum, a->words, a->scales, a->y, 0, a->M, i0, i1, a->K, a->G, a->ldy);
}

/* y[m, n] = sum_g s[n,g] * sum_b d[m,b] * (sum q*code - qsum); K and G multiples of 32, G divides K.
   G = 32 (no model uses it) goes to the scalar reference: the vector path pairs 32-blocks. */
void ternary_mm_q8(const int8_t *q, const float *d, const int32_t *qsum,
                   const uint32_t *words, const uint16_t *scales, float *y,
                   int64_t M, int64_t N, int64_t K, int64_t G, int64_t ldy, int nthreads) {
    const int64_t nb = N / 4;
    tc_mm_args a = {.q = q, .d = d, .qsum = qsum, .words = words, .scales = scales, .y = y, .M = M, .N = N,
                     .K = K, .G = G, .ldy = ldy, .m1 = M};
    if (G % 64 != 0) {
        tp_run(mm_q8_ref_job, &a, N, nthreads);
        return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += TOKEN_TILE) {
        a.m0 = m0;
        a.m1 = m0 + TOKEN_TILE < M ? m0 + TOKEN_TILE : M;
        tp_run(mm_q8_job, &a, nb, nthreads);
        for (int64_t n = nb * 4; n < N; n++)
            neon_block_range_q8(q, d, qsum, words, scales, y, n, 1, a.m0, a.m1, K, G, ldy);
    }
}

#include "ternary_decode.h"  /* the fused decode step, over the kernels above */
