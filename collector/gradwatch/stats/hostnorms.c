
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define LANES 16
#define BLOCK 2048

typedef struct {
    int64_t k;
    void *const *a;
    void *const *b;          /* NULL: sums of a^2 only */
    const int64_t *numel;
    int64_t lo, hi;          /* this worker's range of the concatenated elements */
    int f64;
    int copy;                /* 1: copy a into b (no sums); 2: the same with streaming stores */
    double *sa, *sd;         /* this worker's partial sums, k each */
} job_t;

/* Copy with streaming stores where the CPU has them: a snapshot larger than the caches is
   written once and read once after the update, so pulling its old contents into the cache
   first (what a plain store does) only doubles the traffic. A smaller one (under
   STREAM_MIN_BYTES in all) stays in the cache for that read: plain stores. */
#define STREAM_MIN_BYTES ((int64_t)4 << 20)
static void stream_copy(char *d, const char *s, int64_t bytes) {
#if defined(__SSE2__)
    int64_t head = (int64_t)((16 - ((uintptr_t)d & 15)) & 15);
    if (bytes >= 4096) {
        memcpy(d, s, (size_t)head);
        d += head; s += head; bytes -= head;
        int64_t n = bytes / 64;
        for (int64_t i = 0; i < n; i++, d += 64, s += 64) {
            __m128i w0 = _mm_loadu_si128((const __m128i *)s);
            __m128i w1 = _mm_loadu_si128((const __m128i *)(s + 16));
            __m128i w2 = _mm_loadu_si128((const __m128i *)(s + 32));
            __m128i w3 = _mm_loadu_si128((const __m128i *)(s + 48));
            _mm_stream_si128((__m128i *)d, w0);
            _mm_stream_si128((__m128i *)(d + 16), w1);
            _mm_stream_si128((__m128i *)(d + 32), w2);
            _mm_stream_si128((__m128i *)(d + 48), w3);
        }
        _mm_sfence();
        bytes -= 64 * n;
    }
#endif
    memcpy(d, s, (size_t)bytes);
}

/* 16 lanes, each its own sequential sum in the tensor's type: lane j of a block adds
   elements j, j + 16, j + 32, ... in order, and the block's last n % 16 elements go to lane
   0 after them. The arithmetic is fixed by the source, not by the instructions picked (no
   reassociation, no fused multiply-add), so the bits do not depend on the machine. The 16
   lanes are held in register-sized GCC/clang vectors (32 bytes with AVX, else 16): wider
   vector types than the machine's registers are lowered through memory, several times
   slower than a plain loop. */
#if defined(__AVX__)
#define VBYTES 32
#else
#define VBYTES 16
#endif
typedef float vf __attribute__((vector_size(VBYTES)));
typedef double vd __attribute__((vector_size(VBYTES)));
/* Sums of a^2 and, when b is not NULL, of (b - a)^2 over n elements of type T: blocks of
   `block` elements summed lane by lane, each block's lanes then added in float64, in
   order. float32 uses blocks of BLOCK; float64 one block. */
#define DEFINE_SPAN(name, T, V, block)                                                   \
static void name(const T *a, const T *b, int64_t n, double *sa, double *sd) {           \
    enum { W = (int)(sizeof(V) / sizeof(T)), R = LANES / W };                            \
    double ta = 0.0, td = 0.0;                                                           \
    int64_t i = 0;                                                                       \
    while (i < n) {                                                                      \
        int64_t end = n - i > (block) ? i + (block) : n;                                 \
        V aa[R], ad[R];                                                                  \
        for (int r = 0; r < R; r++) { aa[r] = (V){0}; ad[r] = (V){0}; }                  \
        if (b) {                                                                         \
            for (; i + LANES <= end; i += LANES) {                                       \
                for (int r = 0; r < R; r++) {                                            \
                    V x, y, d;                                                           \
                    memcpy(&x, a + i + r * W, sizeof x);                                 \
                    memcpy(&y, b + i + r * W, sizeof y);                                 \
                    d = y - x;                                                           \
                    aa[r] += x * x;                                                      \
                    ad[r] += d * d;                                                      \
                }                                                                        \
            }                                                                            \
        } else {                                                                         \
            for (; i + LANES <= end; i += LANES) {                                       \
                for (int r = 0; r < R; r++) {                                            \
                    V x;                                                                 \
                    memcpy(&x, a + i + r * W, sizeof x);                                 \
                    aa[r] += x * x;                                                      \
                }                                                                        \
            }                                                                            \
        }                                                                                \
        T la[LANES], ld[LANES];                                                          \
        memcpy(la, aa, sizeof la);                                                       \
        memcpy(ld, ad, sizeof ld);                                                       \
        if (b) {                                                                         \
            for (; i < end; i++) {                                                       \
                T xs = a[i], ds = b[i] - xs;                                             \
                la[0] += xs * xs;                                                        \
                ld[0] += ds * ds;                                                        \
            }                                                                            \
        } else {                                                                         \
            for (; i < end; i++) la[0] += a[i] * a[i];                                   \
        }                                                                                \
        for (int j = 0; j < LANES; j++) {                                                \
            ta += (double)la[j];                                                         \
            td += (double)ld[j];                                                         \
        }                                                                                \
    }                                                                                    \
    *sa += ta;                                                                           \
    *sd += td;                                                                           \
}

DEFINE_SPAN(span_f32, float, vf, BLOCK)
DEFINE_SPAN(span_f64, double, vd, INT64_MAX)

static void *work(void *arg) {
    job_t *job = (job_t *)arg;
    int64_t start = 0;
    for (int64_t t = 0; t < job->k; t++) {
        int64_t n = job->numel[t], lo = job->lo - start, hi = job->hi - start;
        start += n;
        if (hi <= 0) break;
        if (lo >= n) continue;
        if (lo < 0) lo = 0;
        if (hi > n) hi = n;
        if (job->copy) {
            int64_t size = job->f64 ? 8 : 4;
            char *d = (char *)job->b[t] + lo * size;
            const char *src = (const char *)job->a[t] + lo * size;
            if (job->copy == 2) stream_copy(d, src, (hi - lo) * size);
            else memcpy(d, src, (size_t)((hi - lo) * size));
        } else if (job->f64) {
            const double *a = (const double *)job->a[t] + lo;
            const double *b = job->b ? (const double *)job->b[t] + lo : NULL;
            span_f64(a, b, hi - lo, &job->sa[t], &job->sd[t]);
        } else {
            const float *a = (const float *)job->a[t] + lo;
            const float *b = job->b ? (const float *)job->b[t] + lo : NULL;
            span_f32(a, b, hi - lo, &job->sa[t], &job->sd[t]);
        }
    }
    return NULL;
}

static int run(int64_t k, void *const *a, void *const *b, const int64_t *numel, int f64,
               int copy, int threads, int spawn, double *out_a, double *out_d) {
    int64_t total = 0;
    for (int64_t t = 0; t < k; t++) total += numel[t];
    if (threads < 1) threads = 1;
    job_t *jobs = (job_t *)calloc((size_t)threads, sizeof(job_t));
    double *part = (double *)calloc((size_t)(2 * threads * k + 1), sizeof(double));
    pthread_t *ids = (pthread_t *)calloc((size_t)threads, sizeof(pthread_t));
    char *started = (char *)calloc((size_t)threads, 1);
    if (!jobs || !part || !ids || !started) {
        free(jobs); free(part); free(ids); free(started);
        return -1;
    }
    for (int w = 0; w < threads; w++) {
        job_t *j = &jobs[w];
        j->k = k; j->a = a; j->b = b; j->numel = numel; j->f64 = f64;
        j->copy = copy && total * (f64 ? 8 : 4) >= STREAM_MIN_BYTES ? 2 : copy;
        j->lo = total / threads * w;
        j->hi = w == threads - 1 ? total : total / threads * (w + 1);
        j->sa = part + (int64_t)2 * w * k;
        j->sd = j->sa + k;
    }
    for (int w = 1; w < threads && spawn; w++)
        started[w] = pthread_create(&ids[w], NULL, work, &jobs[w]) == 0;
    work(&jobs[0]);
    for (int w = 1; w < threads; w++) {
        if (started[w]) pthread_join(ids[w], NULL);
        else work(&jobs[w]);
    }
    for (int64_t t = 0; t < k && out_a; t++) {
        double sa = 0.0, sd = 0.0;
        for (int w = 0; w < threads; w++) {
            sa += jobs[w].sa[t];
            sd += jobs[w].sd[t];
        }
        out_a[t] = sa;
        if (out_d) out_d[t] = sd;
    }
    free(jobs); free(part); free(ids); free(started);
    return 0;
}

/* out_a[t] = sum a_t^2; out_d[t] = sum (b_t - a_t)^2 when b is not NULL. Returns 0, or -1
   when memory for the partial sums could not be had (nothing written). */
int gw_sumsq(int64_t k, void *const *a, void *const *b, const int64_t *numel, int f64,
             int threads, int spawn, double *out_a, double *out_d) {
    return run(k, a, b, numel, f64, 0, threads, spawn, out_a, out_d);
}

/* gw_sumsq's sums, then their square roots in place (the L2 norms; sqrt is correctly
   rounded, as torch's). Returns how many of the k (2k with b) norms are not finite, or
   -1 as gw_sumsq. */
int gw_norms(int64_t k, void *const *a, void *const *b, const int64_t *numel, int f64,
             int threads, int spawn, double *out_a, double *out_d) {
    if (run(k, a, b, numel, f64, 0, threads, spawn, out_a, out_d)) return -1;
    int bad = 0;
    for (int64_t t = 0; t < k; t++) {
        out_a[t] = sqrt(out_a[t]);
        bad += !isfinite(out_a[t]);
        if (out_d) {
            out_d[t] = sqrt(out_d[t]);
            bad += !isfinite(out_d[t]);
        }
    }
    return bad;
}

/* b_t = a_t, element for element. Returns 0, or -1 as gw_sumsq (nothing copied). */
int gw_copy(int64_t k, void *const *a, void *const *b, const int64_t *numel, int f64,
            int threads, int spawn) {
    return run(k, a, b, numel, f64, 1, threads, spawn, NULL, NULL);
}
