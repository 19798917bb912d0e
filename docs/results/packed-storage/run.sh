#!/usr/bin/env bash
# Packed weight storage on the chain: throughput (bench/) and learning (learning/), as measured on 2026-11-27.
# Needs a GPU. From the repository root; for bench/h200-b/b352cc8.json first:
#   mkdir old_rev && git archive b352cc8 opiq_jax experiments envs pyproject.toml | tar -x -C old_rev
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/packed-storage}
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.csv
B="python -m opiq_jax.cli bench --no-progress --repeats 3 --precision bfloat16 --envs chain --no-baseline --min-runs 4096 --max-runs 4096"
# bench/h200-a (one call on an H200): packed, then float32 storage
$B --weight-storage packed --out $OUT/h200-a/packed
$B --out $OUT/h200-a/float32
# bench/h200-b (another call, the same H200 machine): the revision before (b352cc8), float32 storage, packed
(cd old_rev && PYTHONPATH=$PWD:${PYTHONPATH:-} $B --out $OUT/h200-b/b352cc8)
$B --out $OUT/h200-b/float32
$B --weight-storage packed --out $OUT/h200-b/packed
# bench/h100: the same two on an H100 (run this block there)
# $B --out $OUT/h100/float32; $B --weight-storage packed --out $OUT/h100/packed
# learning/ (one call on the H200): 4 methods x 100 seeds x 100k steps, float32 storage then packed
C="python -m experiments.compare_methods --env chain --methods opiq opiq_no_ob dqn_pc dqn --seeds 100 --precision bfloat16 --no-progress"
for storage in float32 packed; do $C --weight-storage $storage --out $OUT/learning/$storage; done
# on any machine, from the two folders (each with metrics.csv gzipped to metrics.csv.gz as committed):
python -m experiments.before_after --before $OUT/learning/float32 --after $OUT/learning/packed --out $OUT/learning/before-after
