/* A tiny thread pool for the CPU kernels, built so that a busy core does not stall a matmul.

   Why not OpenMP: a parallel region ends with a barrier that waits for every thread of the team, so
   when another process holds a core, each of the ~200 matmuls of a decoded token waits for a thread
   that is not even running (a scheduler time slice, milliseconds): decode collapses to < 1 tok/s.
   Here the calling thread and the helpers claim chunks of rows from one atomic counter, and the
   caller waits only for chunks that were claimed; a helper that wakes up late finds no work left.

   State: one 64-bit word = generation (16 bits) | helpers allowed (8) | chunk count (20) | next
   chunk (20). A helper claims a chunk with a compare-and-swap that also checks the generation, so
   it can never take work of a job it did not see published; the job's function and context are
   read after a successful claim (the caller cannot publish the next job before every claimed chunk
   of this one is done). Idle helpers spin ~100 us (a decode step issues the next matmul within
   microseconds), then sleep on a condition variable.

   Usage: tp_run(fn, ctx, n, nthreads) calls fn(ctx, i0, i1) on disjoint ranges covering [0, n).
   Under -std=c11 the including file defines _POSIX_C_SOURCE 200809L before any #include; link with
   -pthread. */

#ifndef TERNARY_POOL_H
#define TERNARY_POOL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TP_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define TP_PAUSE() __asm__ __volatile__("yield")
#else
#define TP_PAUSE() ((void)0)
#endif

#define TP_MAX_HELPERS 255
#define TP_MAX_CHUNKS ((1 << 20) - 1)
#define TP_SPIN_NS 3000000

typedef void (*tp_fn)(const void *ctx, int64_t i0, int64_t i1);

static struct {
    _Atomic uint64_t word;        /* gen:16 | helpers:8 | nchunks:20 | next:20 */
    _Atomic int64_t done;         /* chunks finished in the current job */
    _Atomic int sleepers;
    tp_fn fn;                     /* current job (valid while a claimed chunk is unfinished) */
    const void *ctx;
    int64_t n, chunk;
    int nhelpers;                 /* helper threads started */
    pthread_mutex_t run_lock;     /* one job at a time (ctypes lets several Python threads call) */
    pthread_mutex_t sleep_lock;
    pthread_cond_t wake;
    int atfork_set;
} tp_pool = {0, 0, 0, 0, 0, 0, 0, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
             PTHREAD_COND_INITIALIZER, 0};

static inline uint32_t tp_gen(uint64_t w) { return (uint32_t)(w >> 48); }
static inline uint32_t tp_helpers(uint64_t w) { return (uint32_t)(w >> 40) & 0xFF; }
static inline uint32_t tp_nchunks(uint64_t w) { return (uint32_t)(w >> 20) & 0xFFFFF; }
static inline uint32_t tp_next(uint64_t w) { return (uint32_t)w & 0xFFFFF; }

static inline int64_t tp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* claim the next chunk of generation gen; -1 when none is left (or a newer job is published) */
static inline int64_t tp_claim(uint32_t gen) {
    uint64_t w = atomic_load_explicit(&tp_pool.word, memory_order_acquire);
    for (;;) {
        if (tp_gen(w) != gen || tp_next(w) >= tp_nchunks(w)) return -1;
        if (atomic_compare_exchange_weak_explicit(&tp_pool.word, &w, w + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return (int64_t)tp_next(w);
    }
}

static inline void tp_work(uint32_t gen) {
    int64_t c;
    while ((c = tp_claim(gen)) >= 0) {
        const int64_t i0 = c * tp_pool.chunk;
        const int64_t i1 = i0 + tp_pool.chunk < tp_pool.n ? i0 + tp_pool.chunk : tp_pool.n;
        tp_pool.fn(tp_pool.ctx, i0, i1);
        atomic_fetch_add_explicit(&tp_pool.done, 1, memory_order_release);
    }
}

static void *tp_helper_main(void *arg) {
    const uint32_t id = (uint32_t)(uintptr_t)arg;
    uint32_t seen = tp_gen(atomic_load(&tp_pool.word));
    for (;;) {
        uint64_t w = atomic_load_explicit(&tp_pool.word, memory_order_acquire);
        if (tp_gen(w) == seen) {
            const int64_t t0 = tp_now_ns();
            int spins = 0;
            while (tp_gen(w = atomic_load_explicit(&tp_pool.word, memory_order_acquire)) == seen) {
                TP_PAUSE();
                if (++spins % 256 == 0 && tp_now_ns() - t0 > TP_SPIN_NS) break;
            }
            if (tp_gen(w) == seen) {
                pthread_mutex_lock(&tp_pool.sleep_lock);
                atomic_fetch_add(&tp_pool.sleepers, 1);
                while (tp_gen(w = atomic_load(&tp_pool.word)) == seen)
                    pthread_cond_wait(&tp_pool.wake, &tp_pool.sleep_lock);
                atomic_fetch_sub(&tp_pool.sleepers, 1);
                pthread_mutex_unlock(&tp_pool.sleep_lock);
            }
        }
        seen = tp_gen(w);
        if (id < tp_helpers(w)) tp_work(seen);
    }
    return NULL;
}

static void tp_after_fork(void) {  /* the child has no helper threads: start fresh ones on use */
    tp_pool.nhelpers = 0;
    atomic_store(&tp_pool.sleepers, 0);
    pthread_mutex_init(&tp_pool.run_lock, NULL);
    pthread_mutex_init(&tp_pool.sleep_lock, NULL);
    pthread_cond_init(&tp_pool.wake, NULL);
}

static void tp_start_helpers(int want) {
    if (!tp_pool.atfork_set) {
        pthread_atfork(NULL, NULL, tp_after_fork);
        tp_pool.atfork_set = 1;
    }
    while (tp_pool.nhelpers < want) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int rc = pthread_create(&th, &attr, tp_helper_main, (void *)(uintptr_t)tp_pool.nhelpers);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;  /* fewer helpers: the caller does more of the work */
        tp_pool.nhelpers++;
    }
}

/* fn(ctx, i0, i1) over [0, n) on up to nthreads threads (the caller included) */
static void tp_run(tp_fn fn, const void *ctx, int64_t n, int nthreads) {
    if (n <= 0) return;
    if (nthreads > TP_MAX_HELPERS + 1) nthreads = TP_MAX_HELPERS + 1;
    if (nthreads <= 1 || n == 1) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&tp_pool.run_lock);
    tp_start_helpers(nthreads - 1);
    /* ~8 chunks per thread: a thread that loses its core holds up at most one small chunk, and the
       shared counter is touched rarely enough to cost nothing */
    int64_t chunks = (int64_t)nthreads * 8;
    if (chunks > n) chunks = n;
    if (chunks > TP_MAX_CHUNKS) chunks = TP_MAX_CHUNKS;
    const int64_t chunk = (n + chunks - 1) / chunks;
    chunks = (n + chunk - 1) / chunk;
    tp_pool.fn = fn;
    tp_pool.ctx = ctx;
    tp_pool.n = n;
    tp_pool.chunk = chunk;
    atomic_store_explicit(&tp_pool.done, 0, memory_order_relaxed);
    const uint64_t old = atomic_load(&tp_pool.word);
    const uint32_t gen = (tp_gen(old) + 1) & 0xFFFF;
    const uint32_t helpers = (uint32_t)(nthreads - 1 < tp_pool.nhelpers ? nthreads - 1 : tp_pool.nhelpers);
    atomic_store(&tp_pool.word, ((uint64_t)gen << 48) | ((uint64_t)helpers << 40) | ((uint64_t)chunks << 20));
    if (atomic_load(&tp_pool.sleepers) > 0) {
        pthread_mutex_lock(&tp_pool.sleep_lock);
        pthread_cond_broadcast(&tp_pool.wake);
        pthread_mutex_unlock(&tp_pool.sleep_lock);
    }
    tp_work(gen);
    /* wait only for chunks that helpers claimed and are still computing */
    int spins = 0;
    while (atomic_load_explicit(&tp_pool.done, memory_order_acquire) < chunks) {
        TP_PAUSE();
        if (++spins > 2000) sched_yield();  /* a preempted helper needs this core back */
    }
    pthread_mutex_unlock(&tp_pool.run_lock);
}

#endif /* TERNARY_POOL_H */
