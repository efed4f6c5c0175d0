"""Ingest: frames in, rows stored.

``batch_writer`` (the one writer thread per process, batching requests into transactions),
``prepare_helper`` (decoding bodies in a child process when the server is busy),
``frame_store`` (the one function that stores frames, idempotently), ``frame_rows`` with
``validate`` and ``recordmeta`` (frames to rows, everything validated first), ``summaries``
(the coarse overview blobs written with each chunk) and ``spool_import`` (spools on disk,
through the same path). Ingest raises alerts (:mod:`gradwatch_server.alerts.rules`) and
never imports the read side.
"""
