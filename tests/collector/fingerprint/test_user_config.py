"""normalize_config and config_hash on the kinds of config real training scripts pass."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gradwatch.core.errors import ConfigError
from gradwatch.fingerprint.user_config import REPR_KEY, config_hash, normalize_config


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Optim:
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)


@dataclasses.dataclass
class TrainConfig:
    optim: Optim = dataclasses.field(default_factory=Optim)
    out: Path = Path("runs/a")
    layers: list[Optim] = dataclasses.field(default_factory=lambda: [Optim(lr=0.5)])


class Opaque:
    pass


class ToDict:
    def __init__(self, data: Any) -> None:
        self.data = data

    def to_dict(self) -> Any:
        return self.data


class ToContainer:
    def to_container(self) -> dict[str, Any]:
        return {"model": {"width": 128}}


def as_json(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def test_none_is_empty() -> None:
    assert normalize_config(None) == {}


def test_dict_values_become_json_types() -> None:
    config = {
        "lr": 1e-3,
        "steps": 10,
        "flag": True,
        "name": "x",
        "nothing": None,
        "shape": (1, 2),
        "path": Path("/data/x"),
        "color": Color.RED,
        "level": Level.HIGH,
        "dtype": torch.bfloat16,
        "device": torch.device("cpu"),
        "tags": {"b", "a"},
        "nested": {"k": [Path("p"), {"deep": Color.RED}]},
    }
    assert normalize_config(config) == {
        "lr": 1e-3,
        "steps": 10,
        "flag": True,
        "name": "x",
        "nothing": None,
        "shape": [1, 2],
        "path": "/data/x",
        "color": "red",
        "level": 3,
        "dtype": "torch.bfloat16",
        "device": "cpu",
        "tags": ["a", "b"],
        "nested": {"k": ["p", {"deep": "red"}]},
    }
    result = normalize_config(config)
    assert type(result["level"]) is int
    json.dumps(result, allow_nan=False)


def test_other_objects_become_marked_reprs_without_addresses() -> None:
    result = normalize_config({"obj": Opaque(), "fn": test_none_is_empty})
    assert set(result["obj"]) == {REPR_KEY}
    assert "Opaque object" in result["obj"][REPR_KEY]
    assert "0x" not in result["obj"][REPR_KEY]
    assert "0x" not in result["fn"][REPR_KEY]
    assert config_hash({"obj": Opaque()}) == config_hash({"obj": Opaque()})


def test_namespace() -> None:
    args = argparse.Namespace(lr=0.1, out=Path("o"), seed=0)
    assert normalize_config(args) == {"lr": 0.1, "out": "o", "seed": 0}


def test_nested_dataclass() -> None:
    assert normalize_config(TrainConfig()) == {
        "optim": {"lr": 1e-3, "betas": [0.9, 0.999]},
        "out": "runs/a",
        "layers": [{"lr": 0.5, "betas": [0.9, 0.999]}],
    }


def test_duck_typed_containers() -> None:
    assert normalize_config(ToContainer()) == {"model": {"width": 128}}
    assert normalize_config(ToDict({"a": ToDict({"b": 1})})) == {"a": {"b": 1}}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_kept(value: float) -> None:
    result = normalize_config({"x": value, "xs": [value]})
    for got in (result["x"], result["xs"][0]):
        assert isinstance(got, float)
        assert math.isnan(got) if math.isnan(value) else got == value


def test_int_keys_become_strings() -> None:
    assert normalize_config({1: "a", "b": {2: 3}}) == {"1": "a", "b": {"2": 3}}


@pytest.mark.parametrize("key", [(1, 2), None, 1.5, True])
def test_other_keys_are_rejected(key: object) -> None:
    with pytest.raises(ConfigError, match="config keys must be str or int"):
        normalize_config({"ok": {key: 1}})


def test_keys_that_collide_are_rejected() -> None:
    with pytest.raises(ConfigError, match="two keys"):
        normalize_config({1: "a", "1": "b"})


def test_cycles_are_rejected() -> None:
    looped: dict[str, Any] = {"a": 1}
    looped["self"] = looped
    with pytest.raises(ConfigError, match="cycle"):
        normalize_config(looped)
    items: list[Any] = []
    items.append(items)
    with pytest.raises(ConfigError, match="cycle"):
        normalize_config({"items": items})
    args = argparse.Namespace()
    args.me = args
    with pytest.raises(ConfigError, match="cycle"):
        normalize_config(args)


def test_shared_values_are_not_cycles() -> None:
    shared = {"lr": 0.1}
    assert normalize_config({"a": shared, "b": [shared, shared]}) == {
        "a": {"lr": 0.1},
        "b": [{"lr": 0.1}, {"lr": 0.1}],
    }


def test_too_deep_is_rejected() -> None:
    deep: dict[str, Any] = {}
    for _ in range(200):
        deep = {"x": deep}
    with pytest.raises(ConfigError, match="levels deep"):
        normalize_config(deep)


@pytest.mark.parametrize("bad", [[1, 2], 3, "lr=0.1", TrainConfig, 1.5])
def test_non_configs_are_rejected_with_what_and_how(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        normalize_config(bad)
    message = str(info.value)
    assert type(bad).__qualname__ in message
    assert "argparse.Namespace" in message
    assert "dataclass" in message


def test_to_dict_returning_a_non_mapping_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"to_dict\(\) returned list"):
        normalize_config(ToDict([1]))


def test_numpy_values_when_numpy_is_imported() -> None:
    np = pytest.importorskip("numpy")
    result = normalize_config({"a": np.float32(0.5), "b": np.arange(3), "c": np.bool_(True)})
    assert result == {"a": 0.5, "b": [0, 1, 2], "c": True}


def test_normalising_twice_changes_nothing() -> None:
    once = normalize_config({"obj": Opaque(), "cfg": TrainConfig(), "nan": float("nan")})
    assert as_json(normalize_config(once)) == as_json(once)


def test_hash_is_sha256_of_documented_canonical_json() -> None:
    expected = hashlib.sha256(
        b'gradwatch-config-v1\n{"a":1,"b":[1.0,NaN,-Infinity],"c":{"x":"\\u00e9"}}'
    ).hexdigest()
    config = {"c": {"x": "é"}, "b": [1.0, float("nan"), float("-inf")], "a": 1}
    assert config_hash(config) == expected


def test_hash_ignores_key_order_and_raw_vs_normalised() -> None:
    raw = {"b": Path("p"), "a": {"y": 1, "x": Color.RED}}
    assert config_hash(raw) == config_hash({"a": {"x": "red", "y": 1}, "b": "p"})
    assert config_hash(raw) == config_hash(normalize_config(raw))


@pytest.mark.parametrize(
    ("left", "right"),
    [(1, 1.0), (1, True), (0.0, -0.0), (float("inf"), float("-inf")), ("1", 1), ([1], (2,))],
)
def test_hash_distinguishes_types_and_values(left: object, right: object) -> None:
    assert config_hash({"v": left}) != config_hash({"v": right})


def test_every_nan_hashes_the_same() -> None:
    assert config_hash({"v": float("nan")}) == config_hash({"v": -float("nan")})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=6))
def test_hash_is_order_independent_and_normalising_is_idempotent(
    config: dict[str, Any],
) -> None:
    reversed_config = dict(reversed(list(config.items())))
    assert config_hash(reversed_config) == config_hash(config)
    once = normalize_config(config)
    assert as_json(normalize_config(once)) == as_json(once)
