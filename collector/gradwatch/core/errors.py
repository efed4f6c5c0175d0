"""Exceptions raised by gradwatch.

The hierarchy::

    GradwatchError                  base of everything gradwatch raises on purpose
    ├── ConfigError                 a bad argument to watch() or a CLI flag (raised at setup)
    ├── IntegrityError              a check whose policy is ``raise`` fired (before the bad update)
    └── WireError                   a malformed frame or record (spool or HTTP ingest)

Nothing else escapes into a training loop: internal failures inside hooks are counted
and reported once instead.
"""

from __future__ import annotations


class GradwatchError(Exception):
    """Base class of every exception gradwatch raises on purpose."""


class ConfigError(GradwatchError, ValueError, TypeError):
    """A bad argument was passed to gradwatch; the message says what was received and the fix."""


class IntegrityError(GradwatchError, RuntimeError):
    """A check with policy ``raise`` fired; the optimizer step was not applied."""


class WireError(GradwatchError, ValueError):
    """Bytes that are not a valid gradwatch frame or record."""
