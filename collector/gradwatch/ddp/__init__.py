"""Distributed runs: per-rank summaries and the rank-0 comparer thread."""
