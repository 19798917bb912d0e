#!/usr/bin/env bash
# Prints the time, each part's last logged step and packs its metrics, run_info and log into OUT/parts.tgz.
# Usage: bash poll_parts.sh ROOT OUT
root=$1; out=$2
echo "time: $(date -u +%FT%TZ) ($(date +%s))"
for part in plain rnd dora bsp; do
  m="$root/$part/batch_000/metrics.csv"
  [ -f "$m" ] || [ -f "$root/$part.log" ] || continue
  last=$( [ -f "$m" ] && tail -n 1 "$m" | cut -c1-60 )
  echo "$part: $(wc -l < "$m" 2>/dev/null) rows; last: $last; log: $(tail -n 1 "$root/$part.log" | cut -c1-160)"
done
nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv,noheader
(cd "$root" && tar czf "$out/parts.tgz" --exclude='checkpoint*' --exclude='*.npz' */batch_000/metrics.csv \
  */batch_000/run_info.json */batch_000/config.json */*.json *.log 2>/dev/null) || true
