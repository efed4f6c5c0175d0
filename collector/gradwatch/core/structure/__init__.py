"""A run's structure, read from what the collector already records (no cost in training).

Every optimizer step the collector records its lifecycle events (``zero_grad``,
``backward``, gradients changed by hand, …) and which parameter tensors received a
gradient. :mod:`gradwatch.core.structure.signature` turns one step into a *signature*;
:mod:`gradwatch.core.structure.timeline` finds where a run's signature changes for good (a
structure event, info: "from step 120 ``encoder.weight`` no longer receives gradients");
:mod:`gradwatch.core.structure.group` learns what held on every step of every good run of a
replicate group and says where another run of the group first breaks it (a warning).
Periodic patterns (accumulation, alternating heads, conditional computation) are not
changes: a change is a new regime that lasts, never one step that differs.
"""
