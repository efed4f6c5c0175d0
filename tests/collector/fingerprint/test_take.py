"""The fingerprint: leaves the run untouched, hashes initial parameters bit-exactly, reads git."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from typing import Any

import pytest
import torch

from gradwatch.core.errors import ConfigError
from gradwatch.fingerprint import take as fingerprint
from gradwatch.fingerprint.take import (
    collect_fast,
    nondeterminism_risks,
    tensor_checksums,
)

INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def mlp(seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def fast(model: torch.nn.Module) -> dict[str, Any]:
    names, params = zip(*model.named_parameters(), strict=True)
    return collect_fast(list(params), config={"lr": 0.1}, names=list(names))


def flags() -> dict[str, Any]:
    return {
        "det": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn": (
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
            torch.backends.cudnn.enabled,
        ),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "threads": (torch.get_num_threads(), torch.get_num_interop_threads()),
        "grad": torch.is_grad_enabled(),
    }


def train(model: torch.nn.Module, *, fingerprint_at: int | None) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        if step == fingerprint_at:
            fast(model)
        x = torch.randn(5, 8)
        loss = torch.nn.functional.dropout(model(x), 0.5).pow(2).mean()
        opt.zero_grad()
        torch.autograd.backward(loss)
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def test_collect_fast_leaves_rng_flags_and_model_untouched() -> None:
    np = pytest.importorskip("numpy")
    model = mlp(0)
    model.eval()
    model[0].weight.requires_grad_(False)
    np.random.seed(3)
    random.seed(4)
    before = (torch.get_rng_state(), random.getstate(), np.random.get_state(), flags())
    values = [p.detach().clone() for p in model.parameters()]
    fp = fast(model)
    after = (torch.get_rng_state(), random.getstate(), np.random.get_state(), flags())
    assert torch.equal(before[0], after[0])
    assert before[1] == after[1]
    assert before[2][0] == after[2][0]
    assert np.array_equal(before[2][1], after[2][1])
    assert before[2][2:] == after[2][2:]
    assert before[3] == after[3]
    assert not model.training
    assert [p.requires_grad for p in model.parameters()] == [False, True, True, True]
    assert all(torch.equal(a, b) for a, b in zip(values, model.parameters(), strict=True))
    assert fp["seeds"]["numpy_random_state_sha256"] is not None


def test_collect_fast_never_imports_numpy_random() -> None:
    code = (
        "import sys, torch\n"
        "from gradwatch.fingerprint.take import collect_fast\n"
        "before = 'numpy.random' in sys.modules\n"
        "collect_fast(list(torch.nn.Linear(2, 2).parameters()), config={})\n"
        "print(before, 'numpy.random' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_training_is_bit_identical_with_the_fingerprint() -> None:
    plain = train(mlp(1), fingerprint_at=None)
    watched = train(mlp(1), fingerprint_at=2)
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))


def test_fingerprint_is_json_and_has_every_section() -> None:
    fp = fast(mlp(0))
    assert set(fp) == {
        "seeds",
        "determinism",
        "versions",
        "device",
        "config",
        "config_hash",
        "init_params_hash",
        "init_param_checksums",
    }
    json.dumps(fp, allow_nan=False)
    assert fp["versions"]["torch"] == torch.__version__
    assert fp["device"]["types"] == ["cpu"]
    assert fp["device"]["pid"] == os.getpid()
    assert fp["determinism"]["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert [c["name"] for c in fp["init_param_checksums"]] == [
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
    ]


def test_seed_heuristic() -> None:
    state, seed = torch.get_rng_state(), torch.initial_seed()
    try:
        torch.manual_seed(12345)
        assert fast(mlp(12345))["seeds"]["torch_seed_user_set"] is True
        torch.seed()  # what torch does at start-up: a random 64-bit seed
        fp = collect_fast([], config={})
        assert fp["seeds"]["torch_seed_user_set"] is (torch.initial_seed() < 2**32)
    finally:
        torch.manual_seed(seed)
        torch.set_rng_state(state)


def test_rng_state_hashes_follow_the_state() -> None:
    torch.manual_seed(0)
    first = collect_fast([], config={})["seeds"]
    torch.rand(1)
    second = collect_fast([], config={})["seeds"]
    assert first["torch_rng_state_sha256"] != second["torch_rng_state_sha256"]
    assert first["python_random_state_sha256"] == second["python_random_state_sha256"]


def test_init_hash_equal_for_same_seed_and_differs_for_another() -> None:
    assert fast(mlp(7))["init_params_hash"] == fast(mlp(7))["init_params_hash"]
    assert fast(mlp(7))["init_params_hash"] != fast(mlp(8))["init_params_hash"]


@pytest.mark.parametrize("index", range(4))
@pytest.mark.parametrize("bit", [0, 22, 31])
def test_one_flipped_bit_changes_the_hash_and_only_that_checksum(index: int, bit: int) -> None:
    model = mlp(0)
    before = fast(model)
    param = list(model.parameters())[index]
    with torch.no_grad():
        flat = param.view(-1).view(torch.int32)
        flat[flat.numel() // 2] ^= 1 << bit if bit < 31 else -(2**31)
    after = fast(model)
    assert after["init_params_hash"] != before["init_params_hash"]
    changed = [
        a["name"]
        for a, b in zip(after["init_param_checksums"], before["init_param_checksums"], strict=True)
        if a["checksum"] != b["checksum"]
    ]
    assert changed == [before["init_param_checksums"][index]["name"]]


def naive_checksum(tensor: torch.Tensor) -> tuple[int, int]:
    """Python-only reference: whole 8-byte words, then the last elements, as signed ints."""
    data = bytes(tensor.detach().contiguous().view(-1).view(torch.uint8).tolist())
    size = tensor.element_size()
    whole = len(data) - len(data) % 8
    values = list(struct.unpack(f"<{whole // 8}q", data[:whole]))
    tail_format = {1: "B", 2: "h", 4: "i"}.get(size, "q")
    values += struct.unpack(f"<{(len(data) - whole) // size}{tail_format}", data[whole:])
    mask = (1 << 64) - 1
    return sum(values) & mask, sum(v * (i + 1) for i, v in enumerate(values)) & mask


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    ],
)
@pytest.mark.parametrize("width", [3, 256])
@pytest.mark.parametrize("shape", [(6, 5), (7,), (0,), (40, 41)])
def test_checksums_match_a_naive_reference(
    dtype: torch.dtype, width: int, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fingerprint, "_WIDTH", width)
    gen = torch.Generator().manual_seed(0)
    tensor = (torch.randn(shape, generator=gen, dtype=torch.float64) * 1e6).to(dtype)
    assert tensor_checksums([tensor]) == [naive_checksum(tensor)]
    if tensor.numel():
        flipped = tensor.clone()
        flipped.view(-1).view(INT_VIEW[min(tensor.element_size(), 8)])[-1] ^= 1
        assert tensor_checksums([flipped]) != tensor_checksums([tensor])


def test_checksum_of_a_view_equals_that_of_its_copy() -> None:
    tensor = torch.randn(4, 6, generator=torch.Generator().manual_seed(1)).t()
    assert not tensor.is_contiguous()
    assert tensor_checksums([tensor]) == tensor_checksums([tensor.contiguous()])


def test_checksum_of_an_unaligned_view_equals_that_of_its_copy() -> None:
    base = torch.randn(11, generator=torch.Generator().manual_seed(2))
    for view in (base[1:], base[3:8], base.to(torch.bfloat16)[1:]):
        assert view.storage_offset() * view.element_size() % 8
        assert tensor_checksums([view]) == tensor_checksums([view.clone()])
        assert tensor_checksums([view]) == [naive_checksum(view)]


def test_permuted_values_change_the_checksum() -> None:
    tensor = torch.arange(10, dtype=torch.float32)
    assert tensor_checksums([tensor]) != tensor_checksums([tensor.flip(0)])


def test_tensors_without_data_have_no_checksum() -> None:
    lazy = torch.nn.LazyLinear(3)
    meta = torch.empty(3, device="meta")
    sparse = torch.eye(3).to_sparse()
    assert tensor_checksums([lazy.weight, meta, sparse, torch.ones(1)])[:3] == [None] * 3


def test_names_must_match_params() -> None:
    with pytest.raises(ConfigError, match="2 names for 1 parameters"):
        collect_fast([torch.ones(1)], config={}, names=["a", "b"])


# --- nondeterminism_risks ---------------------------------------------------------------


def cuda_fingerprint(**determinism: Any) -> dict[str, Any]:
    defaults = {
        "deterministic_algorithms": False,
        "cudnn_benchmark": False,
        "cuda_matmul_allow_tf32": False,
        "cuda_matmul_fp32_precision": "none",
        "float32_matmul_precision": "highest",
        "cublas_workspace_config": None,
    }
    return {
        "seeds": {"torch_seed_user_set": True},
        "determinism": {**defaults, **determinism},
        "device": {"types": ["cuda"]},
    }


def fields(fp: dict[str, Any]) -> list[str]:
    return [risk["field"] for risk in nondeterminism_risks(fp)]


def test_seeded_cpu_run_has_no_risks() -> None:
    assert nondeterminism_risks(fast(mlp(0))) == []


def test_unseeded_run_is_a_risk() -> None:
    fp = fast(mlp(0))
    fp["seeds"]["torch_seed_user_set"] = False
    [risk] = nondeterminism_risks(fp)
    assert risk == {
        "field": "seeds.torch_seed_user_set",
        "value": "false",
        "why": risk["why"],
        "fix": risk["fix"],
    }
    assert "manual_seed" in risk["fix"]


def test_cuda_risks() -> None:
    assert fields(cuda_fingerprint()) == ["determinism.deterministic_algorithms"]
    assert fields(cuda_fingerprint(deterministic_algorithms=True)) == [
        "determinism.cublas_workspace_config"
    ]
    safe = cuda_fingerprint(deterministic_algorithms=True, cublas_workspace_config=":4096:8")
    assert fields(safe) == []
    for tf32 in (
        {"cuda_matmul_allow_tf32": True},
        {"cuda_matmul_fp32_precision": "tf32"},
        {"float32_matmul_precision": "high"},
    ):
        risky = cuda_fingerprint(
            deterministic_algorithms=True, cublas_workspace_config=":4096:8", **tf32
        )
        assert fields(risky) == ["determinism.float32_matmul_precision"]
    benchmark = cuda_fingerprint(cudnn_benchmark=True)
    assert "determinism.cudnn_benchmark" in fields(benchmark)


def test_cpu_only_settings_are_not_risks() -> None:
    fp = cuda_fingerprint(cudnn_benchmark=True, cuda_matmul_allow_tf32=True)
    fp["device"]["types"] = ["cpu"]
    assert fields(fp) == []


def test_risks_of_an_empty_fingerprint() -> None:
    assert nondeterminism_risks({}) == []
