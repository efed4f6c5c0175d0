"""gradwatch.stats.intraop: torch ops on gradwatch's own threads start no OpenMP team of
their own, and the training thread's intra-op thread count is left alone."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import torch

import gradwatch
from gradwatch.stats import intraop
from gradwatch.transport.writer import RunIO

needs_openmp = pytest.mark.skipif(
    "OpenMP" not in torch.__config__.parallel_info() or not Path("/proc/self/task").exists(),
    reason="torch's OpenMP backend on Linux",
)


def on_a_thread(first: bool) -> tuple[int, int]:
    """torch's thread count seen by a new thread, and the threads the process gained while
    that thread, having run an op torch parallelises, is alive."""
    seen: list[int] = []
    before = len(os.listdir("/proc/self/task"))
    ran, done = threading.Event(), threading.Event()

    def body() -> None:
        if first:
            intraop.one_thread()
        seen.append(torch.get_num_threads())
        torch.ones(1_000_000).sum()
        ran.set()
        done.wait()

    thread = threading.Thread(target=body)
    thread.start()
    ran.wait()
    tasks = len(os.listdir("/proc/self/task")) - before
    done.set()
    thread.join()
    deadline = time.monotonic() + 5.0  # the team's worker leaves after its thread
    while len(os.listdir("/proc/self/task")) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    return seen[0], tasks


@pytest.fixture
def two_threads() -> object:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    torch.ones(1_000_000).sum()  # the training thread's own team exists
    yield
    torch.set_num_threads(before)


@needs_openmp
@pytest.mark.usefixtures("two_threads")
def test_a_thread_set_to_one_starts_no_team_and_leaves_the_caller_alone() -> None:
    assert on_a_thread(first=False) == (2, 2)  # the thread and its team's worker
    assert on_a_thread(first=True) == (1, 1)
    assert torch.get_num_threads() == 2


@needs_openmp
@pytest.mark.usefixtures("two_threads")
def test_the_writer_thread_runs_torch_ops_on_one_thread(tmp_path: Path) -> None:
    io = RunIO(tmp_path / "run")
    seen: list[int] = []

    def source() -> None:
        seen.append(torch.get_num_threads())
        torch.randn(64, 4096).sum(dim=1)  # a per-sample sum as the batch checksum takes

    io.submit(source)
    assert io.flush()
    io.close()
    assert seen == [1]
    assert torch.get_num_threads() == 2


@needs_openmp
@pytest.mark.usefixtures("two_threads")
def test_a_watched_run_adds_only_its_writer_thread(tmp_path: Path) -> None:
    """Training at 2 threads with a batch the checksum sums in parallel: the process holds
    the training thread's team and gradwatch's writer, no second team."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    before = set(os.listdir("/proc/self/task"))
    run = gradwatch.watch(model, opt, data_dir=tmp_path)
    for thread in run.context.background:
        thread.join()
    for i in range(12):
        x = torch.randn(64, 784, generator=torch.Generator().manual_seed(i))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), torch.zeros(64, dtype=torch.long)).backward()
        opt.step()
    assert run.context.io.flush()
    added = set(os.listdir("/proc/self/task")) - before
    names = {t.native_id: t.name for t in threading.enumerate()}
    run.close()
    assert sorted(names.get(int(t), "native") for t in added) == ["gradwatch-writer"]
    assert run.context.internal_errors == 0
