"""Fused sums of squares for parameters on the CPU: one pass over memory instead of three.

On the CPU a step's statistics are bound by memory traffic, not arithmetic. With stock
torch ops the exact update norm costs a subtraction that writes a whole copy of the
model (``θ_before − θ_after``) and then three norm passes (gradients, parameters and the
difference). The kernel here reads the parameters and the snapshot once and returns
``Σθ²`` and ``Σ(θ_before − θ)²`` per tensor, writing nothing; the gradients' ``Σg²`` is a
second, single-stream call. ``benchmarks/host_norms.py`` times both ways inside a
training loop (results in ``benchmarks/results/host_norms.md``).

It is a few lines of C (``hostnorms.c`` next to this module, shipped as package data),
compiled once per machine with the system C compiler (``$CC``, else ``cc``, ``gcc`` or
``clang``) into ``$GRADWATCH_CACHE`` (else
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
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from gradwatch.session import quietproc

__all__ = ["ENV", "Kernel", "Layout", "cache_dir", "load", "status"]

ENV = "GRADWATCH_CPU_KERNEL"
"""``0`` turns the kernel off (statistics then use stock torch ops)."""

MIN_PER_THREAD = 1 << 18  # elements per range: the split into ranges (fixes the bits)
#: elements per range below which the ranges run one after another on the calling thread
#: instead of on threads of their own (same ranges, same order of sums: the same bits). A
#: new thread competes for a core with torch's intra-op workers, which spin after each op
#: (``benchmarks/kernel_threads.py`` times both ways; figures in docs/cost.md)
SPAWN_PER_THREAD = 1 << 22
COMPILE_TIMEOUT_S = 60.0


def source() -> str:
    """The kernel's C source: ``hostnorms.c`` next to this module, shipped as package data
    (also part of the cache key of the compiled library)."""
    kernel = resources.files(__package__ or __name__).joinpath("hostnorms.c")
    return kernel.read_text(encoding="utf-8")


_FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared", "-pthread")
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
        self._norms = lib.gw_norms
        self._norms.restype = i32
        self._norms.argtypes = self._sumsq.argtypes
        self._copy = lib.gw_copy
        self._copy.restype = i32
        self._copy.argtypes = [i64, ptr, ptr, ptr, i32, i32, i32]

    @staticmethod
    def fits(tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> bool:
        """Whether the kernel can read ``tensors``: contiguous, on the CPU, all ``dtype``
        (float32 or float64)."""
        return Kernel.layout(tensors, dtype) is not None

    @staticmethod
    def layout(tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> Layout | None:
        """Where ``tensors`` lie in memory, read in one pass, or ``None`` when the kernel
        cannot read them (see :meth:`fits`). A layout is valid while the tensors keep
        their storage: callers take it anew each step (a ``.data`` assignment between
        steps can move, resize or re-stride a parameter)."""
        if not (dtype is torch.float32 or dtype is torch.float64):
            return None
        # list comprehensions, one attribute at a time: taken up to three times a step, and
        # half the cost of one loop asking each tensor everything
        if [t.dtype for t in tensors].count(dtype) != len(tensors):
            return None
        if not all([t.is_cpu for t in tensors]) or not all([t.is_contiguous() for t in tensors]):
            return None
        ptrs = [t.data_ptr() for t in tensors]
        return Layout(ptrs, tuple([t.numel() for t in tensors]), dtype is torch.float64)

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
        la = self._checked(a, a[0].dtype if a else torch.float32)
        lb = self._checked(b, la.dtype) if b is not None else None
        return self.sumsq_at(la, lb, threads)

    def sumsq_at(self, a: Layout, b: Layout | None = None, threads: int = 1) -> torch.Tensor:
        """:meth:`sumsq` of tensors whose :meth:`layout` was just taken."""
        k = len(a.ptrs)
        out = torch.empty(2 * k if b is not None else k, dtype=torch.float64)
        if k == 0:
            return out
        pa, pb, sizes, threads, spawn = self._args(a, b, threads)
        base = out.data_ptr()
        if self._sumsq(k, pa, pb, sizes, a.f64, threads, spawn, base, base + 8 * k if pb else None):
            raise MemoryError("gradwatch's CPU norm kernel could not allocate its partial sums")
        return out

    def norms_at(
        self, a: Layout, b: Layout | None = None, threads: int = 1
    ) -> tuple[torch.Tensor, int]:
        """The square roots of :meth:`sumsq_at` (the L2 norms, float64, the same bits as
        ``sumsq_at(...).sqrt_()``) and how many of them are not finite, in one call."""
        k = len(a.ptrs)
        out = torch.empty(2 * k if b is not None else k, dtype=torch.float64)
        if k == 0:
            return out, 0
        pa, pb, sizes, threads, spawn = self._args(a, b, threads)
        base = out.data_ptr()
        second = base + 8 * k if pb else None
        bad = self._norms(k, pa, pb, sizes, a.f64, threads, spawn, base, second)
        if bad < 0:
            raise MemoryError("gradwatch's CPU norm kernel could not allocate its partial sums")
        return out, bad

    def copy(
        self, dst: Sequence[torch.Tensor], src: Sequence[torch.Tensor], threads: int = 1
    ) -> None:
        """``dst[i] ← src[i]`` with streaming stores (callers check :meth:`fits`)."""
        if not src:
            return
        ls = self._checked(src, src[0].dtype)
        self.copy_at(self._checked(dst, ls.dtype), ls, threads)

    def copy_at(self, dst: Layout, src: Layout, threads: int = 1) -> None:
        """:meth:`copy` between tensors whose :meth:`layout` was just taken."""
        if not src.ptrs:
            return
        pa, pb, sizes, threads, spawn = self._args(src, dst, threads)
        if self._copy(len(src.ptrs), pa, pb, sizes, src.f64, threads, spawn):
            raise MemoryError("gradwatch's CPU copy kernel could not allocate its work list")

    def _checked(self, tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> Layout:
        found = self.layout(tensors, dtype)
        if found is None:
            raise ValueError("the kernel reads contiguous CPU float32/float64 tensors of one dtype")
        return found

    @staticmethod
    def _args(a: Layout, b: Layout | None, threads: int) -> tuple[Any, Any, Any, int, int]:
        if b is not None and (b.sizes != a.sizes or b.f64 != a.f64):
            raise ValueError("the kernel's second list must match the first in sizes and dtype")
        total = a.total
        threads = max(1, min(threads, total // MIN_PER_THREAD))
        spawn = int(total // threads >= SPAWN_PER_THREAD)
        return a.pointers(), b.pointers() if b is not None else None, a.c_sizes(), threads, spawn


class Layout:
    """The data pointers and element counts of a list of tensors the kernel can read."""

    __slots__ = ("_c_ptrs", "_c_sizes", "f64", "ptrs", "sizes", "total")

    def __init__(self, ptrs: list[int], sizes: tuple[int, ...], f64: bool) -> None:
        self.ptrs = ptrs
        self.sizes = sizes
        self.f64 = int(f64)
        self.total = sum(sizes)
        self._c_ptrs: Any = None
        self._c_sizes: Any = None

    @property
    def dtype(self) -> torch.dtype:
        return torch.float64 if self.f64 else torch.float32

    def pointers(self) -> Any:
        if self._c_ptrs is None:
            # the same addresses come back step after step (parameters, the snapshot, and
            # gradients the allocator hands out again): one C array per list, by value
            key = tuple(self.ptrs)
            found = _POINTERS.get(key)
            if found is None:
                if len(_POINTERS) >= _POINTERS_KEPT:
                    _POINTERS.clear()
                found = _POINTERS[key] = (ctypes.c_void_p * len(key))(*key)
            self._c_ptrs = found
        return self._c_ptrs

    def c_sizes(self) -> Any:
        if self._c_sizes is None:
            # the same lists of sizes come back every step (a model's gradients, parameters)
            found = _SIZES.get(self.sizes)
            if found is None:
                if len(_SIZES) >= _SIZES_KEPT:
                    _SIZES.clear()
                found = _SIZES[self.sizes] = (ctypes.c_int64 * len(self.sizes))(*self.sizes)
            self._c_sizes = found
        return self._c_sizes


_SIZES: dict[tuple[int, ...], Any] = {}  # read-only C arrays of element counts, by value
_SIZES_KEPT = 64
_POINTERS: dict[tuple[int, ...], Any] = {}  # read-only C arrays of data pointers, by value
_POINTERS_KEPT = 64


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
    code = source()
    key = hashlib.sha256(
        "\0".join(
            [code, " ".join(_FLAGS), cc, str(st.st_size), str(st.st_mtime_ns), _machine()]
        ).encode()
    ).hexdigest()[:16]
    root = cache_dir() / "kernels"
    path = root / f"hostnorms-{key}.so"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        problem = _compile(cc, root, path, code)
        if problem is not None:
            return None, f"torch ops (compiling the CPU norm kernel with {cc} failed: {problem})"
    return Kernel(ctypes.CDLL(str(path)), path), f"fused C kernel ({path})"


def _compile(cc: str, root: Path, path: Path, code: str) -> str | None:
    """Compile into a temporary file of ``root``, then rename it into place (atomic: a
    concurrent process either finds the finished library or builds its own copy)."""
    with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
        src = Path(tmp) / "hostnorms.c"
        src.write_text(code, encoding="utf-8")
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
