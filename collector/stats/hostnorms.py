"""Fused sums of squares for parameters on the CPU: one pass over memory instead of three.

On the CPU a step's statistics are bound by memory traffic, not arithmetic. With stock
torch ops the exact update norm costs a subtraction that writes a whole copy of the
model (``θ_before − θ_after``) and then three norm passes (gradients, parameters and the
difference). The kernel here reads the parameters and the snapshot once and returns
``Σθ²`` and ``Σ(θ_before − θ)²`` per tensor, writing nothing; the gradients' ``Σg²`` is a
second, single-stream call. ``benchmarks/host_norms.py`` times both ways inside a
training loop (results in ``benchmarks/results/host_norms.md``).

It is a few lines of C, compiled once per machine with the system C compiler (``$CC``,
else ``cc``, ``gcc`` or ``clang``) into ``$GRADWATCH_CACHE`` (else
``$XDG_CACHE_HOME/gradwatch``, else ``~/.cache/gradwatch``) and loaded with ``ctypes``;
the first ``watch()`` on a machine pays the compile (about 0.2 s), later ones load the
cached library. Without a compiler, or with ``GRADWATCH_CPU_KERNEL=0``, statistics use
the stock ops (:func:`status` says which and why). Accelerators never use it.

Arithmetic, so that results do not depend on the machine or the compiler: 16 float
lanes per block of 2048 elements (no reassociation, no fused multiply-add:
``-ffp-contract=off``), block sums added in float64 in order; float64 tensors accumulate
in float64 lanes. Work is split into ``torch.get_num_threads()`` ranges of the
concatenated tensors (at most one per 256K elements), each summed on its own, and the
partial sums are added in range order, so a given thread count gives the same bits on
every run. The ranges run on threads of their own only when each holds 4M elements or
more; smaller ones run one after another on the calling thread (same bits), since a new
thread must wait for a core that torch's intra-op workers are spinning on. NaN and ±Inf
propagate as in any sum of squares.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from gradwatch.session import quietproc

__all__ = ["ENV", "Kernel", "cache_dir", "load", "status"]

ENV = "GRADWATCH_CPU_KERNEL"
"""``0`` turns the kernel off (statistics then use stock torch ops)."""

MIN_PER_THREAD = 1 << 18  # elements per range: the split into ranges (fixes the bits)
#: elements per range below which the ranges run one after another on the calling thread
#: instead of on threads of their own (same ranges, same order of sums: the same bits). A
#: new thread competes for a core with torch's intra-op workers, which spin after each op
#: (``benchmarks/kernel_threads.py`` times both ways; figures in docs/cost.md)
SPAWN_PER_THREAD = 1 << 22
COMPILE_TIMEOUT_S = 60.0

SOURCE = r"""
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
    int copy;                /* 1: copy a into b (no sums) */
    double *sa, *sd;         /* this worker's partial sums, k each */
} job_t;

/* Copy with streaming stores where the CPU has them: the snapshot is written once and
   read once a step later, so pulling its old contents into the cache first (what a plain
   store does) only doubles the traffic. */
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

/* 16 lanes as GCC/clang vector types: each lane is its own sequential sum, whatever
   instructions the compiler picks, so the bits do not depend on the machine */
typedef float vf __attribute__((vector_size(64)));
typedef double vd __attribute__((vector_size(128)));

/* Sums of a^2 and, when b is not NULL, of (b - a)^2 over n elements of type T, in the
   16 lanes of vector type V: blocks of `block` elements summed lane by lane, each block's
   lanes then added in float64, in order. float32 uses blocks of BLOCK; float64 one block. */
#define DEFINE_SPAN(name, T, V, block)                                                   \
static void name(const T *a, const T *b, int64_t n, double *sa, double *sd) {           \
    double ta = 0.0, td = 0.0;                                                           \
    int64_t i = 0;                                                                       \
    while (i < n) {                                                                      \
        int64_t end = n - i > (block) ? i + (block) : n;                                 \
        V aa = {0}, ad = {0}, x, y, d;                                                   \
        if (b) {                                                                         \
            for (; i + LANES <= end; i += LANES) {                                       \
                memcpy(&x, a + i, sizeof x);                                             \
                memcpy(&y, b + i, sizeof y);                                             \
                d = y - x;                                                               \
                aa += x * x;                                                             \
                ad += d * d;                                                             \
            }                                                                            \
            for (; i < end; i++) {                                                       \
                T xs = a[i], ds = b[i] - xs;                                             \
                aa[0] += xs * xs;                                                        \
                ad[0] += ds * ds;                                                        \
            }                                                                            \
        } else {                                                                         \
            for (; i + LANES <= end; i += LANES) {                                       \
                memcpy(&x, a + i, sizeof x);                                             \
                aa += x * x;                                                             \
            }                                                                            \
            for (; i < end; i++) {                                                       \
                T xs = a[i];                                                             \
                aa[0] += xs * xs;                                                        \
            }                                                                            \
        }                                                                                \
        for (int j = 0; j < LANES; j++) {                                                \
            ta += (double)aa[j];                                                         \
            td += (double)ad[j];                                                         \
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
            stream_copy((char *)job->b[t] + lo * size, (const char *)job->a[t] + lo * size,
                        (hi - lo) * size);
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
        j->k = k; j->a = a; j->b = b; j->numel = numel; j->f64 = f64; j->copy = copy;
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

/* b_t = a_t, element for element. Returns 0, or -1 as gw_sumsq (nothing copied). */
int gw_copy(int64_t k, void *const *a, void *const *b, const int64_t *numel, int f64,
            int threads, int spawn) {
    return run(k, a, b, numel, f64, 1, threads, spawn, NULL, NULL);
}
"""

_FLAGS = ("-O3", "-ffp-contract=off", "-fPIC", "-shared", "-pthread")
_NATIVE = ("-march=native",)


class Kernel:
    """The loaded library: per-tensor sums of squares, and the snapshot copy, of contiguous
    CPU float32/float64 tensors (see the module docstring for the arithmetic)."""

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
        self.path = path
        i64, ptr, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        self._sumsq = lib.gw_sumsq  # CDLL functions: the GIL is released while they run
        self._sumsq.restype = i32
        self._sumsq.argtypes = [i64, ptr, ptr, ptr, i32, i32, i32, ptr, ptr]
        self._copy = lib.gw_copy
        self._copy.restype = i32
        self._copy.argtypes = [i64, ptr, ptr, ptr, i32, i32, i32]

    @staticmethod
    def fits(tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> bool:
        """Whether the kernel can read ``tensors``: contiguous, on the CPU, all ``dtype``
        (float32 or float64)."""
        return (dtype is torch.float32 or dtype is torch.float64) and all(
            t.dtype is dtype and t.is_cpu and t.is_contiguous() for t in tensors
        )

    def sumsq(
        self,
        a: Sequence[torch.Tensor],
        b: Sequence[torch.Tensor] | None = None,
        threads: int = 1,
    ) -> torch.Tensor:
        """``Σa²`` per tensor (float64, ``len(a)``), followed by ``Σ(b − a)²`` per tensor
        when ``b`` is given, with up to ``threads`` threads (at most one per
        :data:`MIN_PER_THREAD` elements). Callers check :meth:`fits` for ``a`` and ``b``;
        this checks that ``b`` matches ``a`` element for element."""
        k = len(a)
        out = torch.empty(2 * k if b is not None else k, dtype=torch.float64)
        if k == 0:
            return out
        pa, pb, sizes, f64, threads, spawn = self._args(a, b, threads)
        base = out.data_ptr()
        if self._sumsq(k, pa, pb, sizes, f64, threads, spawn, base, base + 8 * k if pb else None):
            raise MemoryError("gradwatch's CPU norm kernel could not allocate its partial sums")
        return out

    def copy(
        self, dst: Sequence[torch.Tensor], src: Sequence[torch.Tensor], threads: int = 1
    ) -> None:
        """``dst[i] ← src[i]`` with streaming stores (callers check :meth:`fits`)."""
        if not src:
            return
        pa, pb, sizes, f64, threads, spawn = self._args(src, dst, threads)
        if self._copy(len(src), pa, pb, sizes, f64, threads, spawn):
            raise MemoryError("gradwatch's CPU copy kernel could not allocate its work list")

    @staticmethod
    def _args(
        a: Sequence[torch.Tensor], b: Sequence[torch.Tensor] | None, threads: int
    ) -> tuple[Any, Any, Any, int, int, int]:
        k = len(a)
        sizes = [t.numel() for t in a]
        if b is not None and (
            len(b) != k
            or any(t.numel() != n or t.dtype != a[0].dtype for t, n in zip(b, sizes, strict=True))
        ):
            raise ValueError("the kernel's second list must match the first in sizes and dtype")
        ptr_array = ctypes.c_void_p * k
        pa = ptr_array(*[t.data_ptr() for t in a])
        pb = ptr_array(*[t.data_ptr() for t in b]) if b is not None else None
        total = sum(sizes)
        threads = max(1, min(threads, total // MIN_PER_THREAD))
        spawn = int(total // threads >= SPAWN_PER_THREAD)
        f64 = int(a[0].dtype is torch.float64)
        return pa, pb, (ctypes.c_int64 * k)(*sizes), f64, threads, spawn


_lock = threading.Lock()
_loaded: tuple[Kernel | None, str] | None = None


def status() -> str:
    """``"c"`` when the kernel is loaded, else ``"torch"`` (after :func:`load`)."""
    return "c" if _loaded is not None and _loaded[0] is not None else "torch"


def load() -> tuple[Kernel | None, str]:
    """The kernel (compiled on first use per machine, then cached) and a line saying what
    is used and why. Never raises: any failure means the stock ops are used."""
    global _loaded
    with _lock:
        if _loaded is None:
            try:
                _loaded = _load()
            except Exception as exc:  # any failure leaves the stock ops in place
                _loaded = (None, f"torch ops (the CPU norm kernel failed to load: {exc})")
        return _loaded


def cache_dir() -> Path:
    """``$GRADWATCH_CACHE``, else ``$XDG_CACHE_HOME/gradwatch``, else ``~/.cache/gradwatch``."""
    env = os.environ.get("GRADWATCH_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "gradwatch"


def _compiler() -> str | None:
    env = os.environ.get("CC")
    if env:
        return shutil.which(env)
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _machine() -> str:
    """What ``-march=native`` depends on: the CPU's model and feature flags."""
    quietproc.prime_platform()  # platform.processor() would run `uname -p` by bare name
    parts = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "model name", "Features", "CPU part")):
                    parts.append(line.strip())
                if line.strip() == "":  # the first processor's block is enough
                    break
    except OSError:
        pass
    return "\n".join(parts)


def _load() -> tuple[Kernel | None, str]:
    if os.environ.get(ENV, "1").strip() == "0":
        return None, f"torch ops ({ENV}=0)"
    cc = _compiler()
    if cc is None:
        return None, (
            "torch ops (no C compiler found: install gcc or clang, or set CC, for the fused "
            "CPU norms)"
        )
    st = os.stat(cc)
    key = hashlib.sha256(
        "\0".join(
            [SOURCE, " ".join(_FLAGS), cc, str(st.st_size), str(st.st_mtime_ns), _machine()]
        ).encode()
    ).hexdigest()[:16]
    root = cache_dir() / "kernels"
    path = root / f"hostnorms-{key}.so"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        problem = _compile(cc, root, path)
        if problem is not None:
            return None, f"torch ops (compiling the CPU norm kernel with {cc} failed: {problem})"
    return Kernel(ctypes.CDLL(str(path)), path), f"fused C kernel ({path})"


def _compile(cc: str, root: Path, path: Path) -> str | None:
    """Compile into a temporary file of ``root``, then rename it into place (atomic: a
    concurrent process either finds the finished library or builds its own copy)."""
    with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
        src = Path(tmp) / "hostnorms.c"
        src.write_text(SOURCE, encoding="utf-8")
        out = Path(tmp) / "hostnorms.so"
        error = ""
        for extra in (_NATIVE, ()):  # -march=native where the compiler knows it
            try:
                done = subprocess.run(
                    [cc, *_FLAGS, *extra, "-o", str(out), str(src)],
                    capture_output=True,
                    text=True,
                    timeout=COMPILE_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return str(exc)
            if done.returncode == 0:
                os.replace(out, path)
                return None
            error = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
        return error
