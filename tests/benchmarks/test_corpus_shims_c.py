"""The corpus shims the programs of programs_c run on: the torchtext stand-in (tokenizer,
vocabulary, synthetic Multi30k pairs), the tensorboard writer's log folder, torchvision's
``transforms.transforms`` module, the tiny Hugging Face model and data writer, and that
programs_c's entries are well formed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"
SHIMS = CORPUS / "shims"


def _python(code: str, shim: str, cwd: Path | None = None, **env: str):  # type: ignore[no-untyped-def]
    full = {**os.environ, "PYTHONPATH": str(SHIMS / shim), **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=cwd,
        timeout=300,
    )  # fmt: skip


def test_multi30k_pairs_are_deterministic_sized_and_ordered_by_language_pair() -> None:
    code = (
        "from torchtext.datasets import Multi30k\n"
        "de_en = Multi30k(split='train', language_pair=('de', 'en'))\n"
        "en_de = Multi30k(split='train', language_pair=('en', 'de'))\n"
        "again = Multi30k(split='train', language_pair=('de', 'en'))\n"
        "valid = Multi30k(split='valid')\n"
        "assert de_en == again and len(de_en) == 40 and len(valid) == 7\n"
        "assert [(b, a) for a, b in de_en] == en_de\n"
        "assert all(e.startswith('a ') and e.endswith(' .\\n') for _, e in de_en)\n"
        "print('ok')\n"
    )
    out = _python(code, "torchtext", TEXT_SHIM_TRAIN="40", TEXT_SHIM_VALID="7")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_vocab_puts_specials_first_then_falling_frequency_and_maps_unknowns() -> None:
    code = (
        "from torchtext.data.utils import get_tokenizer\n"
        "from torchtext.vocab import build_vocab_from_iterator\n"
        "tok = get_tokenizer('spacy', 'en')\n"
        "assert tok('a dog, a cat.') == ['a', 'dog', ',', 'a', 'cat', '.']\n"
        "v = build_vocab_from_iterator([tok('b a a c a b')], specials=['<unk>', '<pad>'])\n"
        "assert v.get_itos() == ['<unk>', '<pad>', 'a', 'b', 'c']\n"
        "v.set_default_index(0)\n"
        "assert v(['a', 'zebra']) == [2, 0] and v.lookup_tokens([3, 4]) == ['b', 'c']\n"
        "print('ok')\n"
    )
    out = _python(code, "torchtext")
    assert out.returncode == 0, out.stderr


def test_tensorboard_writer_creates_its_default_log_folder(tmp_path: Path) -> None:
    code = (
        "import os\n"
        "from torch.utils.tensorboard import SummaryWriter\n"
        "w = SummaryWriter(comment='-x')\n"
        "assert os.path.isdir(w.log_dir) and w.log_dir.startswith('runs') and "
        "w.log_dir.endswith('-x')\n"
        "print('ok')\n"
    )
    out = _python(code, "tensorboard", cwd=tmp_path)
    assert out.returncode == 0, out.stderr


def test_transforms_module_holds_the_transform_classes() -> None:
    code = (
        "from torchvision.transforms import transforms\n"
        "import torchvision.transforms as T\n"
        "assert transforms.Compose is T.Compose and transforms.GaussianBlur is T.GaussianBlur\n"
        "print('ok')\n"
    )
    out = _python(code, "torchvision")
    assert out.returncode == 0, out.stderr


def test_tiny_lm_writes_a_model_and_data_that_load_offline(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    helper = str(SHIMS / "hfhub" / "tiny_lm.py")
    for args in (
        ["model", str(tmp_path / "m"), "--chars", "20000", "--vocab", "300"],
        ["data", str(tmp_path / "d"), "--kind", "prompt", "--rows", "20", "--words", "5"],
    ):
        done = subprocess.run([sys.executable, helper, *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    code = (
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"tok = AutoTokenizer.from_pretrained({str(tmp_path / 'm')!r})\n"
        f"model = AutoModelForCausalLM.from_pretrained({str(tmp_path / 'm')!r})\n"
        "ids = tok('def f(x): return x', return_tensors='pt').input_ids\n"
        "assert model(ids).logits.shape[-1] == len(tok) == 300\n"
        "chat = tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False,"
        " add_generation_prompt=True)\n"
        "assert chat == '<|user|>hi<|endoftext|><|assistant|>'\n"
        "print('ok')\n"
    )
    out = _python(code, "_seed", HF_HUB_OFFLINE="1")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(r) for r in (tmp_path / "d" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and rows[0]["prompt"][0]["role"] == "user"
    assert len((tmp_path / "d" / "test.jsonl").read_text().splitlines()) == 2


def test_programs_c_are_well_formed() -> None:
    sys.path.insert(0, str(CORPUS))
    try:
        from spec import load_module

        programs = load_module(CORPUS / "programs_c.py").PROGRAMS  # type: ignore[attr-defined]
    finally:
        sys.path.remove(str(CORPUS))
    tags = {t for p in programs for t in p.tags}
    wanted = {"ssl-momentum", "seq2seq", "hf-trainer", "amp", "checkpointing", "compile"}
    assert wanted | {"distill", "accumulation"} <= tags
    assert len({p.name for p in programs}) == len(programs)
