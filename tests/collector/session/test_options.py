"""Bad arguments to ``watch()`` fail at setup with a clear message, and change nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.session.options import parse_checks


def model_and_opt() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(3, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every": 0}, "every must be a positive integer"),
        ({"every": 1.5}, "every must be a positive integer"),
        ({"accumulation_steps": -2}, "accumulation_steps must be a positive integer"),
        ({"checks": {"no-such-check": "raise"}}, "unknown check id 'no-such-check'"),
        ({"checks": {"stale-grad": "explode"}}, "policy for 'stale-grad' must be one of"),
        ({"checks": ["stale-grad"]}, "checks must be a dict"),
        ({"server": "localhost:8765"}, "server must be an http:// or https:// URL"),
        ({"project": ""}, "project must be a non-empty string"),
        ({"tags": "a,b"}, "tags must be a list of strings"),
        ({"config": [1, 2]}, "config"),
        ({"colour": "red"}, "unknown option(s) ['colour']"),
        ({"batch_checksum": "yes"}, "batch_checksum must be True or False"),
        ({"stats": "norms"}, "stats must be one of all, grad-norms"),
        (
            {"stats": "grad-norms", "checks": {"update-ratio": "warn"}},
            "stats='grad-norms' measures no parameter or update norms, which update-ratio need",
        ),
    ],
)
def test_bad_options_raise_config_error(
    kwargs: dict[str, Any], message: str, data_dir: Path
) -> None:
    model, opt = model_and_opt()
    with pytest.raises(gradwatch.ConfigError) as info:
        gradwatch.watch(model, opt, **kwargs)
    assert message in str(info.value)
    assert not data_dir.exists()  # nothing was created
    assert not opt._optimizer_step_pre_hooks and not model._forward_pre_hooks


def test_bad_model_and_optimizer_arguments() -> None:
    model, opt = model_and_opt()
    with pytest.raises(gradwatch.ConfigError, match=r"needs a torch\.nn\.Module"):
        gradwatch.watch("model", opt)  # type: ignore[arg-type]
    with pytest.raises(gradwatch.ConfigError, match=r"needs a torch\.optim\.Optimizer"):
        gradwatch.watch(model, model)  # type: ignore[arg-type]
    with pytest.raises(gradwatch.ConfigError, match="passed twice"):
        gradwatch.watch(model, [opt, opt])
    other = nn.Linear(2, 2)
    with pytest.raises(gradwatch.ConfigError, match="holds none of the watched model"):
        gradwatch.watch(model, torch.optim.SGD(other.parameters(), lr=0.1))


def test_unwritable_data_dir_is_a_setup_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    model, opt = model_and_opt()
    with pytest.raises(gradwatch.ConfigError, match="cannot create the run directory"):
        gradwatch.watch(model, opt, data_dir=blocker / "sub")


def test_checks_from_environment_and_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADWATCH_CHECKS", "all=record,stale-grad=raise")
    model, opt = model_and_opt()
    with gradwatch.watch(model, opt, checks={"loss-plateau": "off"}) as run:
        assert run.context.options.policy("stale-grad") == "raise"
        assert run.context.options.policy("loss-plateau") == "off"
        assert run.context.options.policy("nonfinite-grad") == "record"
    with pytest.raises(gradwatch.ConfigError, match="expected CHECK=POLICY"):
        parse_checks("stale-grad", source="--check")


def test_errors_are_gradwatch_errors_and_value_errors() -> None:
    assert issubclass(gradwatch.ConfigError, gradwatch.GradwatchError)
    assert issubclass(gradwatch.ConfigError, ValueError)
    assert issubclass(gradwatch.IntegrityError, gradwatch.GradwatchError)


def test_accumulation_steps_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gradwatch run --accumulation-steps K`` passes K to the script this way."""
    model, opt = model_and_opt()
    monkeypatch.setenv("GRADWATCH_ACCUMULATION_STEPS", "4")
    with gradwatch.watch(model, opt) as run:
        assert run.context.options.accumulation_steps == 4
    with gradwatch.watch(model, opt, accumulation_steps=2) as run:
        assert run.context.options.accumulation_steps == 2
    monkeypatch.setenv("GRADWATCH_ACCUMULATION_STEPS", "four")
    with pytest.raises(gradwatch.ConfigError, match="GRADWATCH_ACCUMULATION_STEPS"):
        gradwatch.watch(model, opt)


def test_watch_takes_each_option_as_a_documented_keyword_with_resolves_default() -> None:
    """One source: ``watch()``'s keyword-only parameters are exactly the options that
    :func:`resolve` validates, with the same defaults, each named in the docstring."""
    import inspect

    from gradwatch.session.attach import watch
    from gradwatch.session.options import OPTIONS, resolve

    params = inspect.signature(watch).parameters
    keywords = {n: p for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(keywords) == OPTIONS == set(resolve.__kwdefaults__ or {})
    defaults = resolve.__kwdefaults__ or {}
    assert {n: p.default for n, p in keywords.items()} == {n: defaults[n] for n in keywords}
    assert all(p.annotation is not inspect.Parameter.empty for p in keywords.values())
    doc = watch.__doc__ or ""
    assert [n for n in sorted(OPTIONS) if f"``{n}``" not in doc] == []
