#!/usr/bin/env bash
# Starts programs of maze_baselines as concurrent sweeps on one GPU, in the background.
# Usage: bash start_parts.sh ROOT [PART:MEM_FRACTION ...]   (default: all four parts, a fifth of the card each)
# Each part writes ROOT/<part>/ and ROOT/<part>.log. With MPS=1 in the environment, a CUDA MPS control daemon is
# started first (a user process, not a device setting), so that the parts' kernels share the card at once instead
# of taking turns in time slices.
set -euo pipefail
root=$1; shift; here=$(dirname "$0"); mkdir -p "$root"
parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=(plain:0.2 rnd:0.2 dora:0.2 bsp:0.2)
if [ "${MPS:-0}" = 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  setsid nvidia-cuda-mps-control -d && echo "MPS control daemon started"
fi
for spec in "${parts[@]}"; do
  part=${spec%%:*}; fraction=${spec#*:}
  XLA_PYTHON_CLIENT_MEM_FRACTION=$fraction setsid nohup python -m opiq_jax sweep "$here/parts/maze_baselines_$part.json" \
    --precision bfloat16 --checkpoint-every 300 --no-progress --out "$root/$part" > "$root/$part.log" 2>&1 &
done
