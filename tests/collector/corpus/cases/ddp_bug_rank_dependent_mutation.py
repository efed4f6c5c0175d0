# launch: torchrun 2
# run-args: --project corpus-ddp
# expect: ddp-param-desync at step 50 role cause
"""Bug: a max-norm constraint applied by hand only on the main process (`if rank == 0:`,
as one would guard logging or saving). DDP averages gradients but never compares the
parameters, so from step 11 on rank 0's replica silently differs from rank 1's. The
ranks' parameters are compared every 50 steps: the first comparison after the edit, at
step 50, is a `ddp-param-desync` on rank 0. Twin: ddp_ok_same_mutation_on_every_rank."""

from _setup import ddp_clamped

# the bug: only one replica is constrained
ddp_clamped(lambda rank, step: rank == 0 and step > 10)
