"""The corpus runner's own start-up code in every program it launches (ours, not the
program's): seed python, numpy and torch from ``$GW_CORPUS_SEED`` for programs that do not
seed themselves; remember every optimizer's parameters and count its steps; count backward
passes, and *hand updates*: backward passes after which parameters that are in no optimizer
and received a gradient changed value before the next backward pass (or the end), as
programs that update parameters by hand (``p.data -= lr * p.grad``: MAML, Reptile, manual
SGD) do; at exit, write a sha256 of all their final values (the optimizers' parameters, then
the hand-updated ones) to ``$GW_CORPUS_DIGEST`` (JSON). Both modes (with and without
gradwatch) run exactly this, so equal digests mean gradwatch left training alone. Two
opt-in stand-ins for what a program lacks on this machine: ``$GW_CORPUS_MAX_STEPS`` (a step
cap) and ``$GW_CORPUS_CUDA_AS_CPU`` (``.cuda()`` as a no-op). Then the sitecustomize this
file shadows, if any, runs."""

import atexit
import hashlib
import importlib.machinery
import importlib.util
import itertools
import json
import os
import random
import sys
import threading
import weakref

_SEED = os.environ.get("GW_CORPUS_SEED")
_DIGEST = os.environ.get("GW_CORPUS_DIGEST")
#: ``$GW_CORPUS_MAX_STEPS``: a step cap for a program that has no option for one: the
#: process exits (status 0, digest written) right after the first optimizer's N-th step
_MAX_STEPS = int(os.environ.get("GW_CORPUS_MAX_STEPS") or 0)
_PID = os.getpid()
_optimizers = []  # (class name, [param tensors]) of every optimizer, in creation order
_steps = []  # steps per optimizer, same order
_module_params = []  # weak references to every module parameter, in registration order
_in_optimizer = set()  # ids of the tensors some optimizer holds
_hand = {}  # id -> parameter in no optimizer that received a gradient (hand-updated kind)
_snapshot = []  # (parameter, its values after the last backward pass) of the hand kind
_counts = {"backward": 0, "hand_updates": 0}
_depth = threading.local()  # nested backward calls (Tensor.backward -> autograd.backward)


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


def _hand_params():
    """The live module parameters of the hand-updated kind, in registration order."""
    out, seen = [], set()
    for ref in _module_params:
        p = ref()
        if p is not None and _hand.get(id(p)) is p and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def _settle():
    """Count the last backward pass a hand update if a parameter of the hand kind changed
    value since it ran."""
    global _snapshot
    if _snapshot and any(not p.detach().equal(before) for p, before in _snapshot):
        _counts["hand_updates"] += 1
    _snapshot = []


def _write_digest():
    if os.getpid() != _PID or not _DIGEST:
        return  # a forked worker, or nobody asked
    _settle()
    hand = _hand_params()
    if not _optimizers and not hand:
        return  # a process that trained nothing
    h = hashlib.sha256()
    tensors = 0
    for kind, params in [*_optimizers, ("<by hand>", hand)]:
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
        "backward": _counts["backward"],
        "hand_updates": _counts["hand_updates"],
        "hand_tensors": len(hand),
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
        if type(self).__module__.split(".")[0] == "gradwatch":
            return  # gradwatch's own stand-in (ManualUpdates for hand-updated parameters)
        tensors = [p for group in self.param_groups for p in group["params"]]
        _in_optimizer.update(id(p) for p in tensors)
        self._gw_corpus_index = len(_optimizers)
        _optimizers.append((type(self).__name__, tensors))
        _steps.append(0)

    init.__wrapped__ = original
    torch.optim.Optimizer.__init__ = init

    def count(optimizer, args, kwargs):
        index = getattr(optimizer, "_gw_corpus_index", None)
        if index is not None and index < len(_steps):
            _steps[index] += 1
            if _MAX_STEPS and index == 0 and _steps[0] >= _MAX_STEPS:
                raise SystemExit(0)  # the step cap: the program has no option for one

    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(count)


def _watch_backward():
    """Count outermost backward passes (``Tensor.backward`` calls ``torch.autograd.backward``
    through the module attribute, so wrapping that counts both) and hand updates."""
    import torch
    from torch.nn.modules.module import register_module_parameter_registration_hook

    def registered(module, name, param):
        if param is not None:
            _module_params.append(weakref.ref(param))

    register_module_parameter_registration_hook(registered)
    original = torch.autograd.backward

    def backward(*args, **kwargs):
        global _snapshot
        depth = getattr(_depth, "n", 0)
        if depth:
            return original(*args, **kwargs)
        _settle()
        _depth.n = 1
        try:
            result = original(*args, **kwargs)
        finally:
            _depth.n = 0
        _counts["backward"] += 1
        seen = set()
        with torch.no_grad():
            for ref in _module_params:
                p = ref()
                if p is None or p.grad is None or id(p) in _in_optimizer or id(p) in seen:
                    continue
                seen.add(id(p))
                _hand[id(p)] = p
                _snapshot.append((p, p.detach().clone()))
        return result

    backward.__wrapped__ = original
    torch.autograd.backward = backward


def _cuda_as_cpu():
    """``$GW_CORPUS_CUDA_AS_CPU=1``: a program written for one GPU (``model.cuda()``,
    ``x.cuda()`` with no device check) runs unmodified on the CPU: both calls return their
    object as it is."""
    import torch

    def tensor_cuda(self, *args, **kwargs):
        return self

    def module_cuda(self, *args, **kwargs):
        return self

    torch.Tensor.cuda = tensor_cuda
    torch.nn.Module.cuda = module_cuda


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
        if os.environ.get("GW_CORPUS_CUDA_AS_CPU") == "1":
            _cuda_as_cpu()
        if _SEED is not None:
            _seed_all(int(_SEED))
        if _DIGEST:
            _watch_optimizers()
            _watch_backward()
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
