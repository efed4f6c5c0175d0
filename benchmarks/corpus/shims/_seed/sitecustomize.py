"""The corpus runner's own start-up code in every program it launches (ours, not the
program's): seed python, numpy and torch from ``$GW_CORPUS_SEED`` for programs that do not
seed themselves; remember every optimizer's parameters and count its steps; at exit, write
a sha256 of all their final values to ``$GW_CORPUS_DIGEST`` (JSON). Both modes (with and
without gradwatch) run exactly this, so equal digests mean gradwatch left training alone.
Then the sitecustomize this file shadows, if any, runs."""

import atexit
import hashlib
import importlib.machinery
import importlib.util
import itertools
import json
import os
import random
import sys

_SEED = os.environ.get("GW_CORPUS_SEED")
_DIGEST = os.environ.get("GW_CORPUS_DIGEST")
_PID = os.getpid()
_optimizers = []  # (class name, [param tensors]) of every optimizer, in creation order
_steps = []  # steps per optimizer, same order


def _seed_all(seed):
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    import torch

    torch.manual_seed(seed)


def _tensor_bytes(t):
    import torch

    t = t.detach()
    if t.is_sparse:
        t = t.to_dense()
    return t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _write_digest():
    if os.getpid() != _PID or not _DIGEST or not _optimizers:
        return  # a forked worker, a process that built no optimizer, or nobody asked
    h = hashlib.sha256()
    tensors = 0
    for kind, params in _optimizers:
        h.update(kind.encode())
        for p in params:
            h.update(str((tuple(p.shape), str(p.dtype))).encode())
            h.update(_tensor_bytes(p))
            tensors += 1
    record = {
        "params": h.hexdigest(),
        "optimizers": [kind for kind, _ in _optimizers],
        "tensors": tensors,
        "steps": list(_steps),
    }
    with open(_DIGEST, "w") as f:
        json.dump(record, f)


def _watch_optimizers():
    import torch

    original = torch.optim.Optimizer.__init__

    def init(self, params, *args, **kwargs):
        params = list(params)  # an iterator can be read once; the optimizer gets the list
        original(self, params, *args, **kwargs)
        if getattr(self, "_gw_corpus_index", None) is not None:
            return  # a subclass calling super().__init__: already counted
        tensors = [p for group in self.param_groups for p in group["params"]]
        self._gw_corpus_index = len(_optimizers)
        _optimizers.append((type(self).__name__, tensors))
        _steps.append(0)

    init.__wrapped__ = original
    torch.optim.Optimizer.__init__ = init

    def count(optimizer, args, kwargs):
        index = getattr(optimizer, "_gw_corpus_index", None)
        if index is not None and index < len(_steps):
            _steps[index] += 1

    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(count)


_FIRST = not getattr(sys, "_gw_corpus_site", False)  # a second import of this file: no-op
_argv = getattr(sys, "orig_argv", [])
_GRADWATCH_CLI = any(  # `python -m gradwatch run ...` itself is not the training
    a == "-m" and b.split(".")[0] == "gradwatch" for a, b in itertools.pairwise(_argv)
)
sys._gw_corpus_site = True

if _FIRST and not _GRADWATCH_CLI and (_SEED is not None or _DIGEST):
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        if _SEED is not None:
            _seed_all(int(_SEED))
        if _DIGEST:
            _watch_optimizers()
            atexit.register(_write_digest)

# the sitecustomize this file shadows: the first one on the path entries after this folder
_here = os.path.dirname(os.path.abspath(__file__))
_dirs = [os.path.abspath(p or os.curdir) for p in sys.path]
_rest = sys.path[_dirs.index(_here) + 1 :] if _here in _dirs else []
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest) if _FIRST else None
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["sitecustomize"] = _module
    _spec.loader.exec_module(_module)
