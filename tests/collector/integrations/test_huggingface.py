"""The Hugging Face Transformers callback with the real Trainer on a tiny BERT built from a
config (no downloads: ``HF_HUB_OFFLINE=1``)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

from gradwatch.core.local_reader import load_run
from gradwatch.integrations.huggingface import GradwatchCallback

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def test_trainer_run_with_gradient_accumulation(tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)
    data = [
        {"input_ids": torch.randint(0, 50, (8,), generator=g), "labels": torch.tensor(i % 2)}
        for i in range(32)
    ]
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=4,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        report_to=[],
        save_strategy="no",
        logging_strategy="steps",
        logging_steps=2,
        use_cpu=True,
        disable_tqdm=True,
    )
    callback = GradwatchCallback(project="hf", data_dir=tmp_path / "gw")
    Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
    assert callback.run is not None and callback.run.closed
    run = load_run(callback.run.dir)
    assert len(run.tensor_names) == len(list(model.parameters()))
    assert run.tensor_names[0] == "bert.embeddings.word_embeddings.weight"
    assert run.start["config"]["gradient_accumulation_steps"] == 2
    assert run.start["options"]["accumulation_steps"] == 2
    rows = run.steps[0]
    assert [r.step for r in rows] == [1, 2, 3, 4]
    assert all(r.n_backward == 2 and r.loss is not None for r in rows)
    assert all(any(e[0] == "grad_modified" for e in r.events) for r in rows)  # clipping
    # accumulation and clipping as the Trainer does them are correct code: no lifecycle
    # or numerics errors (a tiny random BERT may still show a vanishing attention key)
    assert not [f for f in callback.run.findings if f.severity == "error"]
    assert not [f for f in callback.run.findings if f.check in ("stale-grad", "param-no-grad")]
    assert run.end is not None and run.end["status"] == "finished"
    # what the Trainer logged every 2 steps is the run's own metrics (drawn on its page)
    logged = {(step, key) for step, key, _ in run.scalars}
    assert {(2, "loss"), (4, "loss"), (2, "learning_rate")} <= logged
