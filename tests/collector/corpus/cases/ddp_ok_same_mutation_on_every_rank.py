# launch: torchrun 2
# run-args: --project corpus-ddp
# expect: quiet
"""Fixed twin of ddp_bug_rank_dependent_mutation: the same max-norm constraint on every
rank keeps the replicas identical (an edit outside `step()` is only `info`)."""

from _setup import ddp_clamped

# every replica is constrained alike
ddp_clamped(lambda rank, step: step > 10)
