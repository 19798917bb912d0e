#!/usr/bin/env bash
# Starts the four programs of maze_baselines as four concurrent sweeps on one GPU, in the background.
# Usage: bash start_parts.sh ROOT   (each part writes ROOT/<part>/ and ROOT/<part>.log)
set -euo pipefail
root=$1; here=$(dirname "$0"); mkdir -p "$root"
for part in plain rnd dora bsp; do
  # Four processes share the card: each may take a fifth of its memory (every part fits in far less).
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.2 setsid nohup python -m opiq_jax sweep "$here/parts/maze_baselines_$part.json" \
    --precision bfloat16 --checkpoint-every 300 --no-progress --out "$root/$part" > "$root/$part.log" 2>&1 &
done
