"""``gradwatch compare`` text for people, and the help texts of the commands a newcomer
types first."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradwatch import cli


@pytest.mark.slow
def test_a_data_order_split_prints_no_none_and_every_tensor(
    drift_runs: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, ids = drift_runs
    code = cli.main(["compare", ids["base"], ids["shuffle"], "--data-dir", str(root)])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("diverged:")
    assert "None" not in out
    # the batch is one hash per step: it is not tied to a tensor, and has no numeric gap
    assert "(batch; first differing tensor " in out and "batch of" not in out
    # the four tensors that split at the same step are one line, not four identical ones
    assert "  step 17: 4 tensors (" in out and " first differ" in out
    assert not [line for line in out.splitlines() if line.startswith("  tensor ")]
    cli.main(["compare", ids["base"], ids["shuffle"], "--json", "--data-dir", str(root)])
    assert capsys.readouterr().out.count('"first_step": 17') == 4


def test_a_long_tensor_list_says_how_many_it_leaves_out() -> None:
    from gradwatch.commands.compare import _tensors

    per_tensor = [{"name": f"layer{i}.weight", "first_step": 3 + i} for i in range(12)]
    per_tensor.append({"name": "head.bias", "first_step": None})
    lines = _tensors(per_tensor)
    assert lines[0] == "  tensor layer0.weight: first differs at step 3"
    assert lines[-2:] == [
        "  ... and 2 more tensors (--json lists all)",
        "  1 tensor never differs",
    ]


def test_tensors_that_split_at_one_step_are_one_line() -> None:
    from gradwatch.commands.compare import _tensors

    per_tensor = [{"name": f"l{i}.weight", "first_step": 101} for i in range(6)]
    per_tensor.append({"name": "head.weight", "first_step": 140})
    assert _tensors(per_tensor) == [
        "  step 101: 6 tensors (l0.weight, l1.weight, l2.weight, …) first differ",
        "  tensor head.weight: first differs at step 140",
    ]


def test_a_differing_hash_says_what_differs_in_words() -> None:
    from gradwatch.commands.compare import _field_line

    d = {"field": "code_hash", "a": "a" * 64, "b": "b" * 64}
    assert _field_line(d) == (
        "code_hash: the code differs (git commit or uncommitted changes) "
        "(aaaaaaaaaaaa… vs bbbbbbbbbbbb…)"
    )
    assert _field_line({"field": "seed", "a": 1, "b": 2}) == "seed: 1 -> 2"


def help_text(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", ["demo", "runs", "findings", "compare", "serve", "run"])
def test_help_shows_the_data_directory_default_and_no_markup(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GRADWATCH_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", "/srv/xdg")
    text = help_text(command, capsys)
    assert "``" not in text and ":mod:" not in text
    assert "~/.local/share/gradwatch" in text and "here /srv/xdg/gradwatch" in text


def test_compare_help_states_the_exact_atol(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text("compare", capsys)
    assert "default: 0 when the comparison is exact, else 1e-12" in text
