#!/usr/bin/env bash
# The plain baseline's rate before (old_rev/, 7bcaeb8) and after (this checkout) its n-step walk became the one
# shared with plain_atari.py (b147cec), in one call on one card, alternating old and new.
# Before it, from the repository root: mkdir old_rev && git archive 7bcaeb8 opiq_jax envs pyproject.toml | tar -x -C old_rev
# Needs a GPU and $OUT (where plainwalk.tgz, every file of the run, is written).
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
RES=/tmp/plainwalk
mkdir -p $RES
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $RES/gpu.csv
git -C "$ROOT" log -1 --format=%H > $RES/new_commit.txt 2>/dev/null || true
pack() { tar czf $OUT/plainwalk.tgz -C /tmp plainwalk; }
run() {  # run REV NAME ARGS...: one measurement from the revision's own checkout
  local rev=$1 name=$2; shift 2
  local src=$ROOT; [ "$rev" = old ] && src=$ROOT/old_rev
  local t0=$SECONDS
  (cd "$src" && PYTHONPATH=$ROOT/.device_site:$src "$@" --out $RES/$rev-$name) > $RES/$rev-$name.log 2>&1
  echo "$rev-$name rc=$? seconds=$((SECONDS - t0))" | tee -a $RES/calls.txt
  pack
}
B="python -m opiq_jax bench --no-progress --repeats 3"
for rev in old new; do run $rev chain $B --envs chain --min-runs 2048 --max-runs 2048; done
for rev in old new; do run $rev maze $B --envs maze --min-runs 512 --max-runs 512 --buffer-size 20000; done
