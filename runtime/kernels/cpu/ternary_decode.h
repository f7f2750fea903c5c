/* One decode token of a dense Qwen3 / Llama model in C (runtime/kernels/cpu/decode_step.py drives it).

   Why: a CPU decode token of the 1.7B runs ~400 small torch ops (norms, RoPE, attention, SiLU,
   residuals) around its ~200 mat-vecs, and their dispatch cost is as large as the mat-vecs' own time.
   ds_layers runs every layer for one token: RMSNorm -> q/k/v mat-vecs (this library's ternary_mm_q8 or
   ternary_mm, the very kernels the model's layers call) -> per-head q/k RMSNorm (Qwen3) -> RoPE from
   the model's own cos/sin tables -> K/V written into the model's own cache at pos (fp32, fp16, bf16 or
   int8 + scale, rounded exactly as runtime.kv_cache writes them) -> softmax attention over [0, pos]
   (GQA, heads in parallel) -> O mat-vec + residual -> RMSNorm -> gate/up -> SiLU * up -> down +
   residual; then the final RMSNorm. The embedding lookup and the LM head stay with the model's modules.

   Included at the end of ternary_x86.c and ternary_neon.c (after their exported kernels). */

#ifndef TERNARY_DECODE_H
#define TERNARY_DECODE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#define DS_MAX_HEAD_DIM 512

enum { DS_KV_F32 = 0, DS_KV_F16 = 1, DS_KV_BF16 = 2, DS_KV_I8 = 3 };

typedef struct {           /* one ternary matrix as the model's CpuTernaryLinear holds it */
    const uint32_t *words;
    const uint16_t *scales;
    int64_t N, K, G;       /* N = 0: no matrix (its rows are part of a fused neighbour) */
    int64_t int8;          /* 1: int8 activations, 0: exact fp32 */
} ds_lin;

typedef struct {
    ds_lin q, k, v, o, gate, up, down;
    const float *in_norm, *post_norm, *q_norm, *k_norm;  /* q_norm/k_norm NULL: none (Llama) */
    void *kc, *vc;         /* this layer's cache [kv_heads, P, D] */
    float *ks, *vs;        /* int8 cache: its scales [kv_heads, P]; else NULL */
} ds_layer;

typedef struct {
    int64_t n_layers, E, H, Hkv, D, I, P, kv_dtype;
    float eps;
    const float *cos, *sin;   /* [P, D] */
    const float *final_norm;
    ds_layer *layers;
    float *scratch;           /* ds_scratch_floats(...) floats, 64-byte aligned */
} ds_model;

TC_EXPORT int64_t ds_scratch_floats(int64_t E, int64_t H, int64_t Hkv, int64_t D, int64_t I, int64_t P);
TC_EXPORT void ds_layers(const ds_model *m, float *x, float *out, int64_t pos, int nthreads);
TC_EXPORT int ds_prompt(const ds_model *m, float *x, float *out, int64_t pos, int64_t T, int nthreads);

/* ------------------------------------------------------------------ fp32 -> fp16 / bf16, round to nearest even */
static inline uint16_t ds_f2h(float f) {
#if defined(__F16C__)
    return (uint16_t)_cvtss_sh(f, 0);
#elif defined(__aarch64__)
    __fp16 h = (__fp16)f;
    uint16_t r;
    memcpy(&r, &h, 2);
    return r;
#else
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t ax = x & 0x7FFFFFFF;
    if (ax >= 0x7F800000) return (uint16_t)(sign | 0x7C00 | (ax > 0x7F800000 ? 0x200 : 0));
    if (ax >= 0x477FF000) return (uint16_t)(sign | 0x7C00);  /* rounds to >= 65520: inf */
    if (ax < 0x38800000) {  /* fp16 subnormal or zero: value / 2^-24, rounded to nearest even */
        if (ax < 0x33000000) return (uint16_t)sign;          /* < 2^-25: 0 (2^-25 ties to 0 too) */
        const uint32_t e = ax >> 23, man = (ax & 0x7FFFFF) | 0x800000;
        const uint32_t shift = 126 - e;                        /* 14 .. 24 */
        uint32_t r = man >> shift;
        const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax >> 13) - (112u << 10));
    const uint32_t rem = ax & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
#endif
}

static inline uint16_t ds_f2bf(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((x >> 16) | 0x40);  /* NaN stays NaN */
    x += 0x7FFF + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static inline float ds_bf2f(uint16_t h) {
    const uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* one cached row (D values) -> fp32 */
static inline void ds_row_f32(const void *base, int64_t idx, int64_t D, int64_t kind, const float *scales,
                              float *out) {
    if (kind == DS_KV_F32) {
        memcpy(out, (const float *)base + idx * D, (size_t)D * 4);
    } else if (kind == DS_KV_F16) {
        const uint16_t *s = (const uint16_t *)base + idx * D;
        int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
        for (; i + 8 <= D; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
#elif defined(__aarch64__)
        for (; i + 4 <= D; i += 4) vst1q_f32(out + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(s + i))));
#endif
        for (; i < D; i++) out[i] = h2f(s[i]);
    } else if (kind == DS_KV_BF16) {
        const uint16_t *s = (const uint16_t *)base + idx * D;
        for (int64_t i = 0; i < D; i++) out[i] = ds_bf2f(s[i]);
    } else {
        const int8_t *s = (const int8_t *)base + idx * D;
        const float sc = scales[idx];
        for (int64_t i = 0; i < D; i++) out[i] = (float)s[i] * sc;
    }
}

/* write one row at idx exactly as runtime.kv_cache.KVCache.update does */
static inline void ds_row_store(void *base, int64_t idx, int64_t D, int64_t kind, float *scales, const float *v) {
    if (kind == DS_KV_F32) {
        memcpy((float *)base + idx * D, v, (size_t)D * 4);
    } else if (kind == DS_KV_F16) {
        uint16_t *d = (uint16_t *)base + idx * D;
        for (int64_t i = 0; i < D; i++) d[i] = ds_f2h(v[i]);
    } else if (kind == DS_KV_BF16) {
        uint16_t *d = (uint16_t *)base + idx * D;
        for (int64_t i = 0; i < D; i++) d[i] = ds_f2bf(v[i]);
    } else {  /* quantize_int8: s = amax / 127; q = sign * floor(|x / s| + 0.5), clamped to +-127 */
        int8_t *d = (int8_t *)base + idx * D;
        float amax = 0.0f;
        for (int64_t i = 0; i < D; i++) amax = fmaxf(amax, fabsf(v[i]));
        const float s = amax / 127.0f, safe = s > 0.0f ? s : 1.0f;
        for (int64_t i = 0; i < D; i++) {
            const float qf = v[i] / safe;
            float r = floorf(fabsf(qf) + 0.5f);
            r = r > 127.0f ? 127.0f : r;
            d[i] = (int8_t)(qf < 0.0f ? -r : r);
        }
        scales[idx] = s;
    }
}

/* 16 independent partial sums: the compiler vectorises this without reassociating anything */
static inline float ds_dot(const float *a, const float *b, int64_t n) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (int j = 0; j < 16; j++) s += acc[j];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline float ds_sumsq(const float *a, int64_t n) { return ds_dot(a, a, n); }

/* HF RMSNorm in fp32: w * (x * rsqrt(mean(x^2) + eps)) */
static inline void ds_rms_norm(const float *x, const float *w, float *out, int64_t n, float eps) {
    const float r = 1.0f / sqrtf(ds_sumsq(x, n) / (float)n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

/* x * cos + rotate_half(x) * sin, in place, full rotary dim */
static inline void ds_rope(float *x, const float *c, const float *s, int64_t D) {
    float t[DS_MAX_HEAD_DIM];
    const int64_t h = D / 2;
    for (int64_t i = 0; i < h; i++) t[i] = x[i] * c[i] - x[i + h] * s[i];
    for (int64_t i = h; i < D; i++) t[i] = x[i] * c[i] + x[i - h] * s[i];
    memcpy(x, t, (size_t)D * 4);
}

/* exp(x) in plain fp32 arithmetic, so loops over it vectorise (libm's expf does not without fast-math):
   Cody-Waite range reduction and a degree-6 polynomial, within 2 ulp of exp over [-87, 88] (clamped
   outside: silu needs no more) */
static inline float ds_exp(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float shifter = 12582912.0f;  /* 1.5 * 2^23: adding it rounds x / ln 2 to an integer n */
    const float t = x * 1.44269504088896341f + shifter;
    const float n = t - shifter;
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t ti;
    memcpy(&ti, &t, 4);
    const int32_t e = (ti - 0x4B400000 + 127) * (1 << 23);  /* the bits of 2^n */
    float sc;
    memcpy(&sc, &e, 4);
    return p * sc;
}

/* out[i] = silu(g[i]) * u[i] (the MLP's activation) */
static inline void ds_silu_mul(const float *g, const float *u, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + ds_exp(-g[i])) * u[i];
}

/* ------------------------------------------------------------------ mat-vecs through the library's kernels */
typedef struct {            /* the int8 activations of one vector (quantize_q8's outputs) */
    int8_t *q;
    float *d;
    int32_t *qsum;
} ds_q8;

static void ds_matvec(const ds_lin *l, const float *x, const ds_q8 *qx, float *y, int nthreads) {
    if (l->N == 0) return;
    if (l->int8)
        ternary_mm_q8(qx->q, qx->d, qx->qsum, l->words, l->scales, y, 1, l->N, l->K, l->G, l->N, nthreads);
    else
        ternary_mm(x, l->words, l->scales, y, 1, l->N, l->K, l->G, l->N, nthreads);
}

#if defined(Q8_ZMM) || defined(Q8_YMM)
/* Up to 3 int8 mat-vecs over one input (q|k|v, gate|up) as ONE pool job: one wake-up and one wait
   instead of three, and the activations are prepared once (prep_q8). Same per-row arithmetic as
   ternary_mm_q8 (q8_job), so the results are bit-identical to separate calls. */
typedef struct {
    q8_args a[3];
    int64_t first[4];  /* row-block offsets of each matrix in the joint range */
    int n;
} ds_multi;

static void ds_multi_job(const void *ctx, int64_t i0, int64_t i1) {
    const ds_multi *mm = (const ds_multi *)ctx;
    for (int j = 0; j < mm->n; j++) {
        const int64_t lo = i0 > mm->first[j] ? i0 : mm->first[j];
        const int64_t hi = i1 < mm->first[j + 1] ? i1 : mm->first[j + 1];
        if (lo < hi) q8_job(&mm->a[j], lo - mm->first[j], hi - mm->first[j]);
    }
}

/* prep: DS_PREP_BYTES of the widest K (64-byte aligned), reused by every call of the token: the prepared
   activations (one-token tiles need no QSUM_IN_FLOAT corrections: prep_q8's per-lane d * qsum serves) */
#define DS_PREP_BYTES(K) (((K) / CW * PB + 63) / 64 * 64 + 64)
static int ds_matvecs_q8(const ds_lin *const *ls, float *const *ys, int n, const ds_q8 *qx, uint8_t *prep,
                         int nthreads) {
    ds_multi mm;
    int cnt = 0;
    const int64_t K = ls[0]->K;
    for (int j = 0; j < n; j++) {
        const ds_lin *l = ls[j];
        if (l->N == 0) continue;
        if (!l->int8 || l->K != K || !q8_vector_ok(l->K, l->G)) return 0;
    }
    mm.first[0] = 0;
    for (int j = 0; j < n; j++) {
        const ds_lin *l = ls[j];
        if (l->N == 0) continue;
        q8_args *a = &mm.a[cnt];
        q8_args_init(a, qx->q, qx->d, qx->qsum, l->words, l->scales, ys[j], 1, l->N, l->K, l->G, l->N);
        a->prep = prep; a->m1 = 1;
        mm.first[cnt + 1] = mm.first[cnt] + (l->N + Q8_RD - 1) / Q8_RD;
        cnt++;
    }
    if (cnt == 0) return 1;
    mm.n = cnt;
    prep_q8(qx->q, qx->d, qx->qsum, prep, 0, 1, K, K / CW);
    tp_run(ds_multi_job, &mm, mm.first[cnt], nthreads);
    return 1;
}
#else
static int ds_matvecs_q8(const ds_lin *const *ls, float *const *ys, int n, const ds_q8 *qx, uint8_t *prep,
                         int nthreads) {
    (void)ls; (void)ys; (void)n; (void)qx; (void)prep; (void)nthreads;
    return 0;
}
#define DS_PREP_BYTES(K) 64
#endif

/* ls[j] (N = 0: absent) times the same input x into ys[j] */
static void ds_matvecs(const ds_lin *const *ls, float *const *ys, int n, const float *x, const ds_q8 *qx,
                       uint8_t *prep, int nthreads) {
    int any8 = 0;
    for (int j = 0; j < n; j++) any8 |= ls[j]->N && ls[j]->int8;
    if (any8) quantize_q8(x, 1, ls[0]->K, qx->q, qx->d, qx->qsum);
    if (any8 && ds_matvecs_q8(ls, ys, n, qx, prep, nthreads)) return;
    for (int j = 0; j < n; j++) ds_matvec(ls[j], x, qx, ys[j], nthreads);
}

/* ------------------------------------------------------------------ attention, one query head per job item */
/* sc[t] = exp(sc[t] - mx) for t < n; returns their sum (8 partial sums: vectorised without reassociating,
   unlike a loop over libm's expf) */
static inline float ds_softmax_sum(float *sc, int64_t n, float mx) {
    for (int64_t t = 0; t < n; t++) sc[t] = ds_exp(sc[t] - mx);
    float part[8] = {0};
    int64_t t8 = 0;
    for (; t8 + 8 <= n; t8 += 8)
        for (int j = 0; j < 8; j++) part[j] += sc[t8 + j];
    float sum = 0.0f;
    for (int j = 0; j < 8; j++) sum += part[j];
    for (; t8 < n; t8++) sum += sc[t8];
    return sum;
}

/* softmax attention of one query head over cached positions [0, n) of its KV head g: out [D] */
static void ds_attend(const ds_model *m, const ds_layer *l, const float *q, float *out, float *sc, int64_t g,
                      int64_t n) {
    const int64_t D = m->D, P = m->P;
    const float scale = 1.0f / sqrtf((float)D);
    float row[DS_MAX_HEAD_DIM];
    float mx = -INFINITY;
    for (int64_t t = 0; t < n; t++) {
        ds_row_f32(l->kc, g * P + t, D, m->kv_dtype, l->ks, row);
        sc[t] = ds_dot(q, row, D) * scale;
        mx = sc[t] > mx ? sc[t] : mx;
    }
    const float inv = 1.0f / ds_softmax_sum(sc, n, mx);
    for (int64_t i = 0; i < D; i++) out[i] = 0.0f;
    for (int64_t t = 0; t < n; t++) {
        ds_row_f32(l->vc, g * P + t, D, m->kv_dtype, l->vs, row);
        const float p = sc[t] * inv;
        for (int64_t i = 0; i < D; i++) out[i] += p * row[i];
    }
}

typedef struct {
    const ds_model *m;
    const ds_layer *l;
    const float *q;   /* [T, qstride]: row t holds the H heads (norm + RoPE applied) */
    float *out;       /* [T, H * D] */
    float *scores;    /* [H, P] */
    int64_t pos, T, qstride;  /* token t is at position pos + t and attends over [0, pos + t] */
} ds_attn_args;

#define DS_QBLOCK 8

/* ds_attend for queries t0..t1 (at most DS_QBLOCK) of head h, with the same arithmetic in the same order
   (so bit-identical), but each cached K/V row is converted to fp32 once for all of them instead of once
   per query; sc: DS_QBLOCK * (pos + t1) floats */
static void ds_attend_block(const ds_attn_args *a, int64_t h, int64_t t0, int64_t t1, float *sc) {
    const ds_model *m = a->m;
    const int64_t D = m->D, P = m->P, g = h / (m->H / m->Hkv), n = a->pos + t1, nq = t1 - t0;
    const float scale = 1.0f / sqrtf((float)D);
    float row[DS_MAX_HEAD_DIM], inv[DS_QBLOCK];
    for (int64_t p = 0; p < n; p++) {
        ds_row_f32(a->l->kc, g * P + p, D, m->kv_dtype, a->l->ks, row);
        for (int64_t i = (p > a->pos + t0 ? p - a->pos - t0 : 0); i < nq; i++)  /* queries that see p */
            sc[i * n + p] = ds_dot(a->q + (t0 + i) * a->qstride + h * D, row, D) * scale;
    }
    for (int64_t i = 0; i < nq; i++) {
        float *si = sc + i * n;
        const int64_t ni = a->pos + t0 + i + 1;
        float mx = -INFINITY;
        for (int64_t p = 0; p < ni; p++) mx = si[p] > mx ? si[p] : mx;
        inv[i] = 1.0f / ds_softmax_sum(si, ni, mx);
        float *out = a->out + (t0 + i) * m->H * D + h * D;
        for (int64_t j = 0; j < D; j++) out[j] = 0.0f;
    }
    for (int64_t p = 0; p < n; p++) {
        ds_row_f32(a->l->vc, g * P + p, D, m->kv_dtype, a->l->vs, row);
        for (int64_t i = (p > a->pos + t0 ? p - a->pos - t0 : 0); i < nq; i++) {
            float *out = a->out + (t0 + i) * m->H * D + h * D;
            const float w = sc[i * n + p] * inv[i];
            for (int64_t j = 0; j < D; j++) out[j] += w * row[j];
        }
    }
}

/* query heads h0..h1 (one job item per head, every token of the chunk) */
static void ds_attn_job(const void *ctx, int64_t h0, int64_t h1) {
    const ds_attn_args *a = (const ds_attn_args *)ctx;
    const ds_model *m = a->m;
    const int64_t D = m->D, group = m->H / m->Hkv;
    /* a prompt chunk: DS_QBLOCK queries share each K/V row's conversion (ds_attend_block) */
    float *sc = a->T > 1 ? (float *)malloc((size_t)(DS_QBLOCK * (a->pos + a->T)) * sizeof(float)) : NULL;
    for (int64_t h = h0; h < h1; h++) {
        int64_t t = 0;
        if (sc)
            for (; t < a->T; t += DS_QBLOCK)
                ds_attend_block(a, h, t, t + DS_QBLOCK < a->T ? t + DS_QBLOCK : a->T, sc);
        for (; t < a->T; t++)  /* one token (decode), or no memory for the block's scores */
            ds_attend(m, a->l, a->q + t * a->qstride + h * D, a->out + t * m->H * D + h * D,
                      a->scores + h * m->P, h / group, a->pos + t + 1);
    }
    free(sc);
}

typedef void (*ds_fn)(const void *ctx, int64_t i0, int64_t i1);

static void ds_parallel(ds_fn fn, const void *ctx, int64_t n, int nthreads) {
#if defined(TERNARY_POOL_H)
    tp_run(fn, ctx, n, nthreads);
#else
    (void)nthreads;
    #pragma omp parallel for schedule(static, 1) num_threads(nthreads)
    for (int64_t i = 0; i < n; i++) fn(ctx, i, i + 1);
#endif
}

/* ------------------------------------------------------------------ the step */
typedef struct {  /* float offsets into the scratch of each part; widest: the widest mat-vec input */
    int64_t h, qkv, att, gu, act, q8, prep, scores, total, widest;
} ds_scratch;

/* h, qkv, att, gate|up, act, q8 (int8 + d + qsum), prep (ds_matvecs_q8's), scores; each part rounded to
   16 floats, so every part of the 64-byte aligned scratch is 64-byte aligned */
static ds_scratch ds_scratch_layout(int64_t E, int64_t H, int64_t Hkv, int64_t D, int64_t I, int64_t P) {
    ds_scratch s;
    int64_t off = 0;
    s.widest = E > H * D ? E : H * D;
    s.widest = s.widest > I ? s.widest : I;
#define DS_PART(part, n) (s.part = off, off += ((n) + 15) / 16 * 16)
    DS_PART(h, E);
    DS_PART(qkv, H * D + 2 * Hkv * D);
    DS_PART(att, H * D);
    DS_PART(gu, 2 * I);
    DS_PART(act, I);
    DS_PART(q8, s.widest / 4 + 2 * (s.widest / TC_QBLOCK) + 16);
    DS_PART(prep, (DS_PREP_BYTES(s.widest) + 3) / 4);
    DS_PART(scores, H * P);
#undef DS_PART
    s.total = off;
    return s;
}

int64_t ds_scratch_floats(int64_t E, int64_t H, int64_t Hkv, int64_t D, int64_t I, int64_t P) {
    return ds_scratch_layout(E, H, Hkv, D, I, P).total;
}

/* one token's q/k heads at position p: q/k RMSNorm (Qwen3), RoPE, then its K/V rows into the cache */
static void ds_qk_store(const ds_model *m, const ds_layer *l, float *qv, float *kv, const float *vv, int64_t p) {
    const int64_t D = m->D, P = m->P;
    const float *cs = m->cos + p * D, *sn = m->sin + p * D;
    for (int64_t i = 0; i < m->H; i++) {
        if (l->q_norm) ds_rms_norm(qv + i * D, l->q_norm, qv + i * D, D, m->eps);
        ds_rope(qv + i * D, cs, sn, D);
    }
    for (int64_t i = 0; i < m->Hkv; i++) {
        if (l->k_norm) ds_rms_norm(kv + i * D, l->k_norm, kv + i * D, D, m->eps);
        ds_rope(kv + i * D, cs, sn, D);
        ds_row_store(l->kc, i * P + p, D, m->kv_dtype, l->ks, kv + i * D);
        ds_row_store(l->vc, i * P + p, D, m->kv_dtype, l->vs, vv + i * D);
    }
}

/* every layer for one token at pos: x [E] (the embedding) is updated in place, out [E] = final norm */
void ds_layers(const ds_model *m, float *x, float *out, int64_t pos, int nthreads) {
    const int64_t E = m->E, H = m->H, Hkv = m->Hkv, D = m->D, I = m->I, P = m->P;
    const ds_scratch sl = ds_scratch_layout(E, H, Hkv, D, I, P);
    const int64_t widest = sl.widest;
    float *h = m->scratch + sl.h, *qkv = m->scratch + sl.qkv, *att = m->scratch + sl.att;
    float *gu = m->scratch + sl.gu, *act = m->scratch + sl.act, *scores = m->scratch + sl.scores;
    ds_q8 qx;
    qx.q = (int8_t *)(m->scratch + sl.q8);
    qx.d = (float *)(qx.q + widest);
    qx.qsum = (int32_t *)(qx.d + widest / TC_QBLOCK);
    float *qv = qkv, *kv = qkv + H * D, *vv = qkv + H * D + Hkv * D;
    uint8_t *prep = (uint8_t *)(m->scratch + sl.prep);

    for (int64_t li = 0; li < m->n_layers; li++) {
        const ds_layer *l = &m->layers[li];
        /* attention */
        ds_rms_norm(x, l->in_norm, h, E, m->eps);
        {   /* a fused q|k|v matrix (k, v absent) writes all three */
            const ds_lin *ls[3] = {&l->q, &l->k, &l->v};
            float *ys[3] = {qv, kv, vv};
            ds_matvecs(ls, ys, 3, h, &qx, prep, nthreads);
        }
        ds_qk_store(m, l, qv, kv, vv, pos);
        const ds_attn_args aa = {m, l, qv, att, scores, pos, 1, H * D};
        ds_parallel(ds_attn_job, &aa, H, nthreads);
        {
            const ds_lin *ls[1] = {&l->o};
            float *ys[1] = {h};
            ds_matvecs(ls, ys, 1, att, &qx, prep, nthreads);
        }
        for (int64_t i = 0; i < E; i++) x[i] += h[i];
        /* MLP */
        ds_rms_norm(x, l->post_norm, h, E, m->eps);
        {   /* a fused gate|up matrix (up absent) writes both */
            const ds_lin *ls[2] = {&l->gate, &l->up};
            float *ys[2] = {gu, gu + I};
            ds_matvecs(ls, ys, 2, h, &qx, prep, nthreads);
        }
        ds_silu_mul(gu, gu + I, act, I);
        {
            const ds_lin *ls[1] = {&l->down};
            float *ys[1] = {h};
            ds_matvecs(ls, ys, 1, act, &qx, prep, nthreads);
        }
        for (int64_t i = 0; i < E; i++) x[i] += h[i];
    }
    ds_rms_norm(x, m->final_norm, out, E, m->eps);
}

/* ------------------------------------------------------------------ a prompt chunk: T tokens at once */
/* ls[j] (N = 0: absent) times the same input x [T, K] into the columns of y [T, ldy], in order */
static void ds_matmuls(const ds_lin *const *ls, int n, const float *x, int64_t T, float *y, int64_t ldy,
                       const ds_q8 *qx, int nthreads) {
    int any8 = 0;
    for (int j = 0; j < n; j++) any8 |= ls[j]->N && ls[j]->int8;
    if (any8) quantize_q8(x, T, ls[0]->K, qx->q, qx->d, qx->qsum);
    int64_t col = 0;
    for (int j = 0; j < n; j++) {
        const ds_lin *l = ls[j];
        if (l->N == 0) continue;
        if (l->int8)
            ternary_mm_q8(qx->q, qx->d, qx->qsum, l->words, l->scales, y + col, T, l->N, l->K, l->G, ldy, nthreads);
        else
            ternary_mm(x, l->words, l->scales, y + col, T, l->N, l->K, l->G, ldy, nthreads);
        col += l->N;
    }
}

enum { DS_IN_NORM, DS_QK, DS_ADD_POST_NORM, DS_ADD };

typedef struct {  /* one per-token stage of a layer over tokens [t0, t1) */
    const ds_model *m;
    const ds_layer *l;
    float *x, *h, *qkv;
    int64_t pos, W, stage;
} ds_rows_args;

static void ds_rows_job(const void *ctx, int64_t t0, int64_t t1) {
    const ds_rows_args *a = (const ds_rows_args *)ctx;
    const ds_model *m = a->m;
    const ds_layer *l = a->l;
    const int64_t E = m->E, H = m->H, Hkv = m->Hkv, D = m->D;
    for (int64_t t = t0; t < t1; t++) {
        float *x = a->x + t * E, *h = a->h + t * E;
        switch (a->stage) {
        case DS_IN_NORM:
            ds_rms_norm(x, l->in_norm, h, E, m->eps);
            break;
        case DS_QK: {
            float *qv = a->qkv + t * a->W, *kv = qv + H * D;
            ds_qk_store(m, l, qv, kv, kv + Hkv * D, a->pos + t);
            break;
        }
        case DS_ADD_POST_NORM:
            for (int64_t i = 0; i < E; i++) x[i] += h[i];
            ds_rms_norm(x, l->post_norm, h, E, m->eps);
            break;
        default:  /* DS_ADD */
            for (int64_t i = 0; i < E; i++) x[i] += h[i];
            break;
        }
    }
}

typedef struct {
    float *gu;
    int64_t I, first;
} ds_silu_args;

/* rows first + [i0, i1): SiLU(gate row t) * up row t of gu [T, 2I], written to gu + t*I (see ds_prompt) */
static void ds_silu_job(const void *ctx, int64_t i0, int64_t i1) {
    const ds_silu_args *a = (const ds_silu_args *)ctx;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t t = a->first + i;
        float *g = a->gu + t * 2 * a->I;
        ds_silu_mul(g, g + a->I, a->gu + t * a->I, a->I);
    }
}

/* Every layer for T tokens at positions pos..pos+T-1 (a prompt chunk): x [T, E] (their embeddings) is
   updated in place, their K/V go into the cache, out [E] = the final norm of the LAST token (the only
   logits a prompt needs). Why: the same chunk through model.forward spends a quarter of its time in
   ~20 torch ops per layer (norms, RoPE, SDPA, SiLU), single-threaded so that OpenMP does not spin on the
   matmuls' core; here they run on the kernels' pool, and the matmuls are the model's own calls
   (ternary_mm_q8 / ternary_mm over T rows). Returns 0, or -1 when its buffers cannot be allocated
   (nothing has been written then). */
int ds_prompt(const ds_model *m, float *x, float *out, int64_t pos, int64_t T, int nthreads) {
    const int64_t E = m->E, H = m->H, Hkv = m->Hkv, D = m->D, I = m->I, P = m->P;
    const int64_t W = H * D + 2 * Hkv * D;
    int64_t widest = E > H * D ? E : H * D;
    widest = widest > I ? widest : I;
    if (T <= 0) return 0;
    /* bytes of each part, rounded to 64 */
#define DS_R64(n) (((n) + 63) / 64 * 64)
    const int64_t b_h = DS_R64(T * E * 4), b_qkv = DS_R64(T * W * 4), b_att = DS_R64(T * H * D * 4);
    const int64_t b_gu = DS_R64(T * 2 * I * 4), b_sc = DS_R64(H * P * 4);
    const int64_t b_q = DS_R64(T * widest), b_d = DS_R64(T * (widest / TC_QBLOCK) * 4);
#undef DS_R64
    uint8_t *buf = (uint8_t *)aligned_alloc(64, (size_t)(b_h + b_qkv + b_att + b_gu + b_sc + b_q + 2 * b_d));
    if (!buf) return -1;
    float *h = (float *)buf, *qkv = (float *)(buf + b_h), *att = (float *)(buf + b_h + b_qkv);
    float *gu = (float *)(buf + b_h + b_qkv + b_att);
    float *scores = (float *)(buf + b_h + b_qkv + b_att + b_gu);
    ds_q8 qx;
    qx.q = (int8_t *)(buf + b_h + b_qkv + b_att + b_gu + b_sc);
    qx.d = (float *)((uint8_t *)qx.q + b_q);
    qx.qsum = (int32_t *)((uint8_t *)qx.d + b_d);
    ds_rows_args ra = {m, NULL, x, h, qkv, pos, W, 0};
    for (int64_t li = 0; li < m->n_layers; li++) {
        const ds_layer *l = &m->layers[li];
        ra.l = l;
        ra.stage = DS_IN_NORM;
        ds_parallel(ds_rows_job, &ra, T, nthreads);
        {
            const ds_lin *ls[3] = {&l->q, &l->k, &l->v};
            ds_matmuls(ls, 3, h, T, qkv, W, &qx, nthreads);
        }
        ra.stage = DS_QK;
        ds_parallel(ds_rows_job, &ra, T, nthreads);
        const ds_attn_args aa = {m, l, qkv, att, scores, pos, T, W};
        ds_parallel(ds_attn_job, &aa, H, nthreads);
        {
            const ds_lin *ls[1] = {&l->o};
            ds_matmuls(ls, 1, att, T, h, E, &qx, nthreads);
        }
        ra.stage = DS_ADD_POST_NORM;
        ds_parallel(ds_rows_job, &ra, T, nthreads);
        {
            const ds_lin *ls[2] = {&l->gate, &l->up};
            ds_matmuls(ls, 2, h, T, gu, 2 * I, &qx, nthreads);
        }
        /* SiLU(gate) * up: row t goes to gu + t*I, so gu's front is the down projection's contiguous input
           and no second [T, I] buffer is held. Rows run in waves [a, 2a): a wave's outputs [aI, 2aI) end
           where its own first input (row a at 2aI) begins and overwrite only rows of earlier waves. */
        for (int64_t a = 0; a < T; a = a ? 2 * a : 1) {
            const ds_silu_args sa = {gu, I, a};
            ds_parallel(ds_silu_job, &sa, (a ? (2 * a < T ? 2 * a : T) : 1) - a, nthreads);
        }
        {
            const ds_lin *ls[1] = {&l->down};
            ds_matmuls(ls, 1, gu, T, h, E, &qx, nthreads);
        }
        ra.stage = DS_ADD;
        ds_parallel(ds_rows_job, &ra, T, nthreads);
    }
    ds_rms_norm(x + (T - 1) * E, m->final_norm, out, E, m->eps);
    free(buf);
    return 0;
}

#endif /* TERNARY_DECODE_H */
