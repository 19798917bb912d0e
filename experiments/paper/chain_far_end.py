"""How many seeds of each method reached the chain's far end, from a committed chain figure's metrics.

A seed reached the far end when its ``max_return`` (the largest training episode return so far) is at
least 1: only the step to the right in the last state pays 1, the left end pays 0.001 a step and an
episode is 109 steps. It also counts the seeds that visited every state (``states_visited`` = chain length).

``python -m experiments.paper.chain_far_end docs/results/precision/chain-all-f32 --out docs/results/chain-far-end``
reads every ``metrics.csv.gz`` below the folder and writes ``far_end.json``, ``far_end.md`` and
``run_info.json`` into ``--out``. CPU only, seconds.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import platform
import time
from collections import defaultdict
from pathlib import Path

from opiq_jax.reporting import portable, source_revision


def per_seed_maxima(rows, metrics=("max_return", "states_visited")) -> dict:
    """{(method, seed): {metric: largest value over the run}} from tidy metric rows."""
    best: dict = defaultdict(dict)
    for row in rows:
        if row["metric"] in metrics:
            key, value = (row["method"], int(row["seed"])), float(row["value"])
            best[key][row["metric"]] = max(value, best[key].get(row["metric"], value))
    return best


def far_end_counts(maxima: dict, chain_length: int) -> dict:
    """Per method: seeds, seeds whose best return reached 1, seeds that visited every state."""
    table: dict = {}
    for (method, _), best in sorted(maxima.items()):
        entry = table.setdefault(method, {"seeds": 0, "reached_far_end": 0, "visited_every_state": 0})
        entry["seeds"] += 1
        entry["reached_far_end"] += best.get("max_return", 0.0) >= 1.0
        entry["visited_every_state"] += best.get("states_visited", 0.0) >= chain_length
    return table


def markdown(table: dict, source: str) -> str:
    lines = [f"# Seeds that reached the chain's far end: `{source}`", "",
             "| method | reached the far end (max_return ≥ 1) | visited every state |", "|---|---|---|"]
    lines += [f"| {m} | {e['reached_far_end']}/{e['seeds']} | {e['visited_every_state']}/{e['seeds']} |"
              for m, e in table.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--chain-length", type=int, default=100)
    args = parser.parse_args(argv)
    start = time.time()
    rows = (r for f in sorted(args.folder.rglob("metrics.csv.gz")) for r in csv.DictReader(gzip.open(f, "rt")))
    table = far_end_counts(per_seed_maxima(rows), args.chain_length)
    args.out.mkdir(parents=True, exist_ok=True)
    options = {"folder": portable(str(args.folder)), "chain_length": args.chain_length}
    (args.out / "far_end.json").write_text(json.dumps({"options": options, "methods": table}, indent=1) + "\n")
    (args.out / "far_end.md").write_text(markdown(table, portable(str(args.folder))))
    info = {"device": f"{os.cpu_count()}-core {platform.machine()} CPU, no accelerator",
            "seconds": round(time.time() - start, 2), **source_revision()}
    (args.out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print(markdown(table, str(args.folder)))


if __name__ == "__main__":
    main()
