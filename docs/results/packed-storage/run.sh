#!/usr/bin/env bash
# Packed weight storage on the chain: throughput (bench/) and learning (learning/), 2026-11-27, in the order
# the commands ran. Calls 1-3 ran on one H200 machine, one after another; call 4 on an H100.
# Needs a GPU. From the repository root; for call 3 first:
#   mkdir old_rev && git archive b352cc8 opiq_jax experiments envs pyproject.toml | tar -x -C old_rev
# The runs wrote to /tmp folders of other names and were copied here as named below.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/packed-storage}
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.csv
B="python -m opiq_jax.cli bench --no-progress --repeats 3 --precision bfloat16 --envs chain --no-baseline --min-runs 4096 --max-runs 4096"
C="python -m experiments.compare_methods --env chain --methods opiq opiq_no_ob dqn_pc dqn --seeds 100 --precision bfloat16 --no-progress"
call=${1:-all}
if [ "$call" = 1 ] || [ "$call" = all ]; then  # bench/h200-a: packed, then float32 storage
  $B --weight-storage packed --out $OUT/h200-a/packed
  $B --out $OUT/h200-a/float32
fi
if [ "$call" = 2 ] || [ "$call" = all ]; then  # learning/: 4 methods x 100 seeds x 100k steps
  for storage in float32 packed; do $C --weight-storage $storage --out $OUT/learning/$storage; done
fi
if [ "$call" = 3 ] || [ "$call" = all ]; then  # bench/h200-b: the revision before, float32 storage, packed
  (cd old_rev && PYTHONPATH=$PWD:${PYTHONPATH:-} $B --out $OUT/h200-b/b352cc8)
  $B --out $OUT/h200-b/float32
  $B --weight-storage packed --out $OUT/h200-b/packed
fi
if [ "$call" = 4 ]; then  # bench/h100, on an H100
  $B --out $OUT/h100/float32
  $B --weight-storage packed --out $OUT/h100/packed
fi
# Then, on any machine (metrics.csv gzipped to metrics.csv.gz, as committed):
#   python -m experiments.before_after --before learning/float32 --after learning/packed --out learning/before-after
