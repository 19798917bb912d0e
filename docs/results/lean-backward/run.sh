#!/usr/bin/env bash
# The lean backward pass (mlp_backward) on the chain under packed storage: throughput (bench/) and learning
# (learning/) and where a step's time goes (profile/), 2026-11-27. Calls 0, 1, 3 and 4 ran on H200s (four
# machines), call 2 on one H100; the commands of one call one after another.
# Needs a GPU. From the repository root, with the revision before in old_rev2:
#   mkdir old_rev2 && git archive 4402642 opiq_jax experiments envs pyproject.toml | tar -x -C old_rev2
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/lean-backward}
mkdir -p $OUT
B="python -m opiq_jax.cli bench --no-progress --repeats 3 --precision bfloat16 --envs chain --no-baseline --min-runs 4096 --max-runs 4096"
C="python -m experiments.compare_methods --env chain --methods opiq opiq_no_ob dqn_pc dqn --seeds 100 --precision bfloat16 --no-progress"
P="python -m experiments.profile_step --env chain --runs 4096 --precision bfloat16 --weight-storage packed --steps-per-chunk 200 --chunks 1 --top 25"
call=${1:-1}
if [ "$call" = 0 ]; then  # profile/before: the revision before (it ran from the tree at 4402642, as old_rev2 holds it)
  (cd old_rev2 && PYTHONPATH=$PWD:${PYTHONPATH:-} $P --out $OUT/profile/before); exit
fi
if [ "$call" = 3 ]; then  # profile/after: this revision (the lean backward pass)
  $P --out $OUT/profile/after; exit
fi
if [ "$call" = 4 ]; then  # bench/h200-final: the committed code (f75ff30), the lean pass then XLA's
  $B --weight-storage packed --out $OUT/h200-final/packed
  $B --weight-storage packed --mlp-backward xla --out $OUT/h200-final/packed-xla-backward
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/h200-final/gpu.csv; exit
fi
card=$([ "$call" = 1 ] && echo h200 || echo h100)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu-$card.csv
# the revision before (packed storage), this one (packed: the lean backward pass, auto on GPUs), this one with
# XLA's backward pass, this one again, and float32 storage (its programs unchanged)
(cd old_rev2 && PYTHONPATH=$PWD:${PYTHONPATH:-} $B --weight-storage packed --out $OUT/$card/4402642-packed)
$B --weight-storage packed --out $OUT/$card/packed
$B --weight-storage packed --mlp-backward xla --out $OUT/$card/packed-xla-backward
$B --weight-storage packed --out $OUT/$card/packed-again
$B --out $OUT/$card/float32
if [ "$call" = 1 ]; then  # learning/packed-lean: 4 methods x 100 seeds x 100k steps, as ../packed-storage/learning
  $C --weight-storage packed --out $OUT/learning/packed-lean
fi
# The profiles' .hlo.txt files are not kept. Then, on any machine (a CPU is enough for the first):
#   python -m experiments.program_identity --against 4402642 --out program_identity
#   python -m experiments.program_identity --against 7e2f95e --envs chain maze montezuma \
#     --out program_identity_7e2f95e (metrics.csv gzipped to metrics.csv.gz, as committed):
#   python -m experiments.before_after --before ../packed-storage/learning/float32 --after learning/packed-lean \
#     --out learning/before-after-float32
#   python -m experiments.before_after --before ../packed-storage/learning/packed --after learning/packed-lean \
#     --out learning/before-after-packed
