"""NaN provenance: where the first non-finite value came from (origin hooks, op cause, replay)."""
