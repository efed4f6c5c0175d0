"""Comparing runs that should agree: the verdict, envelopes of replicates and the fingerprint
diff."""
