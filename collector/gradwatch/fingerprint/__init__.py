"""The reproducibility fingerprint of a run: environment, code provenance and the user's
training config."""
