"""gradwatch corpus shim (see matplotlib's)."""
