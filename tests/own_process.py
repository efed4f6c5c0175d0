"""Runs made by a process of their own, as reruns of a script would be: runs that one
process makes one after another are not replicates of each other.

Each call starts a fresh interpreter (``spawn``: forking a process that already runs torch's
and gradwatch's threads can leave the child waiting forever on a lock a parent thread held),
runs the undecorated function there and returns what it returned; a child that does not
answer within ``TIMEOUT`` seconds is killed and the test fails instead of hanging.
"""

from __future__ import annotations

import functools
import importlib
import multiprocessing
import os
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

TIMEOUT = 240.0  # seconds for one run in its own process (it imports torch first)


def _child(send: Connection, module: str, name: str, hard_exit: bool, args: Any, kw: Any) -> None:
    """In the new process: the decorated function's own body, its result sent back."""
    make = getattr(importlib.import_module(module), name).__wrapped__
    send.send(make(*args, **kw))
    send.close()
    if hard_exit:  # end as a killed process does: no atexit, so the run is never closed
        os._exit(0)


def in_own_process(make: Callable[..., str] | None = None, *, hard_exit: bool = False) -> Any:
    """Decorate a module-level function so each call runs it in a process of its own;
    ``hard_exit``: the process then ends without running exit handlers."""

    def wrap(make: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(make)
        def made(*args: Any, **kwargs: Any) -> str:
            context = multiprocessing.get_context("spawn")
            receive, send = context.Pipe(duplex=False)
            child = context.Process(
                target=_child,
                args=(send, make.__module__, make.__qualname__, hard_exit, args, kwargs),
            )
            child.start()
            send.close()
            try:
                if not receive.poll(TIMEOUT):
                    raise AssertionError(f"{make.__name__} gave no answer in {TIMEOUT:.0f} s")
                result = str(receive.recv())
            finally:
                child.join(TIMEOUT)
                if child.is_alive():
                    child.kill()
            assert child.exitcode == 0, f"{make.__name__} ended with {child.exitcode}"
            return result

        return made

    return wrap if make is None else wrap(make)
