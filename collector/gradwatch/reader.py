"""The documented import path for reading a run spooled on this machine
(``from gradwatch.reader import load_run``); the code is :mod:`gradwatch.core.local_reader`."""

from gradwatch.core.local_reader import LocalRun, latest_run, list_runs, load_run

__all__ = ["LocalRun", "latest_run", "list_runs", "load_run"]
