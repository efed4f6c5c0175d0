#!/usr/bin/env bash
# The GPU benchmarks in one go, results into benchmarks/results/ (gpu_launch.* and
# gpu_sync.*): the launch-bound step (added time and GPU idle time, gradwatch against
# plain) and the no-host-sync proof with its overhead. Without a CUDA GPU it says so and
# exits 2 before measuring anything. About 5 minutes on one GPU.
#   benchmarks/gpu_all.sh                  # uses .venv/bin/python, else python3
#   PYTHON=/path/to/python benchmarks/gpu_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 2)'; then
  echo "gpu_all: no CUDA GPU here (torch.cuda.is_available() is false); nothing measured" >&2
  exit 2
fi
"$PYTHON" -c 'import torch; print("gpu_all:", torch.cuda.get_device_name(), "torch", torch.__version__)'
status=0
"$PYTHON" benchmarks/gpu_launch.py --out benchmarks/results/gpu_launch || status=1
"$PYTHON" benchmarks/gpu_sync.py --out benchmarks/results/gpu_sync || status=1
exit $status
