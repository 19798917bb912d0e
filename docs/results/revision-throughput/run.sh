#!/usr/bin/env bash
# Throughput of two revisions in one call on one card: the previous (old_rev/, acf5d2b) and this one.
# Before it, from the repository root: mkdir old_rev && git archive acf5d2b opiq_jax experiments envs pyproject.toml | tar -x -C old_rev
# Needs a GPU, EnvPool (the atari extra) and $OUT (where revtable.tgz, every file of the run, is written).
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
RES=/tmp/revtable
mkdir -p $RES
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $RES/gpu.csv
pack() { tar czf $OUT/revtable.tgz -C /tmp revtable; }
run() {  # run REV NAME ARGS...: one measurement from the revision's own checkout
  local rev=$1 name=$2; shift 2
  local src=$ROOT; [ "$rev" = old ] && src=$ROOT/old_rev
  local t0=$SECONDS
  (cd "$src" && PYTHONPATH=$ROOT/.device_site:$src "$@" --out $RES/$rev-$name) > $RES/$rev-$name.log 2>&1
  echo "$rev-$name rc=$? seconds=$((SECONDS - t0))" | tee -a $RES/calls.txt
  pack
}
B="python -m opiq_jax.cli bench --no-progress --repeats 3 --precision bfloat16"
for rev in old new; do run $rev chain $B --envs chain --min-runs 4096 --max-runs 4096 --no-baseline; done
for rev in old new; do run $rev maze $B --envs maze --min-runs 1024 --max-runs 1024 --no-baseline; done
run new chain-2048-baseline $B --envs chain --min-runs 2048 --max-runs 2048
for rev in old new; do run $rev montezuma python -m experiments.montezuma_bench --pool-sizes 16 64 --steps 1000; done
