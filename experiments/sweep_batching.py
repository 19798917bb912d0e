"""One sweep trained in one batch and in three: which numbers differ, and whether the selection changes.

A sweep whose runs do not fit the device at once trains them in equal batches, each one compiled program
of its own runs (``opiq_jax.running.sweeping``). A run's keys and hyperparameters do not depend on its batch, so on
the same inputs the numbers can differ only where the compiler computes a run's arithmetic differently for
a program of another size. This trains the same preset both ways on this machine and compares every metric
of every run, then the two selections and the settings each says are tied with its best::

    python -m experiments.sweep_batching --out docs/results/sweep-batching/<machine>

With ``--again`` it also trains the one-batch sweep a second time in this process (``again/``) and compares it
with the first. ``--compare A B`` compares two sweep folders already trained (say, by two processes) and prints
the result as JSON: what differs there is the machine's run-to-run noise, which batching cannot be told apart
from.

It writes ``comparison.json`` (options, counts, the first differences), ``comparison.md``, ``run_info.json``
(device, seconds of each sweep) and the sweep folders (``one/``, ``three/``: preset, plan, settings, best
settings and each batch's metrics, gzipped; the checkpoints are removed).

Reaches inside: opiq_jax.running.sweeping's selection helpers, to compare every value and both selections of two sweeps.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np

import opiq_jax
from opiq_jax.running.sweeping import best_per_method, sweep_rows, tied_with_best

PRESET = {"env": "chain", "seeds": 20, "metric": "test_return",
          "static": {"total_steps": 100_000, "log_every": 1_000},
          "grids": [{"method": "dqn_pc", "grid": {"beta": [0.01, 0.1, 1.0]}}]}
"""DQN + PC's pseudocount scale on the paper's chain: the case in which a selection was seen to flip."""


def keyed(rows: list[dict]) -> dict[tuple, float]:
    return {(r["method"], r["setting"], r["seed"], r["step"], r["metric"]): r["value"] for r in rows}


def differences(one: Path, three: Path) -> dict:
    """Every metric of every run compared: how many differ, per metric, from which step, and by how much."""
    a, b = keyed(sweep_rows(one)), keyed(sweep_rows(three))
    assert a.keys() == b.keys(), "the two sweeps trained different runs"
    differ = [k for k in a if not (a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])))]
    relative = [abs(a[k] - b[k]) / max(abs(a[k]), abs(b[k]), 1e-12) for k in differ if np.isfinite(a[k] - b[k])]
    per_metric: dict[str, int] = {}
    for k in differ:
        per_metric[k[4]] = per_metric.get(k[4], 0) + 1
    runs = {k[:3] for k in differ}
    first = min(differ, key=lambda k: k[3]) if differ else None
    return {"values": len(a), "differ": len(differ), "runs": len({k[:3] for k in a}), "runs_differing": len(runs),
            "per_metric": dict(sorted(per_metric.items())), "first_step": None if first is None else first[3],
            "first": None if first is None else {"key": list(first), "one_batch": a[first], "three_batches": b[first]},
            "largest_relative": max(relative, default=0.0), "smallest_relative": min(relative, default=0.0)}


def selection(folder: Path) -> list[dict]:
    """Each method's best setting with its area's interval and the settings tied with it."""
    ranking = [{**r, **{k: float(r[k]) for k in ("auc", "auc_low", "auc_high")}}
               for r in opiq_jax.load(folder).ranking()]
    return [{"method": t["method"], "best": t["setting"], "auc": t["auc"], "auc_low": t["auc_low"],
             "auc_high": t["auc_high"], "tied": [r["setting"] for r in tied_with_best(ranking, t)]}
            for t in best_per_method(ranking)]


def keep_small(folder: Path) -> None:
    """The sweep folder without its checkpoints and lock, each batch's metrics gzipped."""
    for path in folder.rglob("*"):
        if path.name.startswith(("checkpoint", ".")) and path.is_file():
            path.unlink()
        elif path.name == "metrics.csv":
            with open(path, "rb") as f, gzip.open(path.with_name("metrics.csv.gz"), "wb") as g:
                shutil.copyfileobj(f, g)
            path.unlink()


def markdown(report: dict) -> str:
    d, (one, three) = report["differences"], report["selections"]
    lines = [f"# One batch against {report['options']['batches']} on {report['device']}", "",
             f"{d['values']:,} metric values of {d['runs']} runs compared: {d['differ']:,} differ, in "
             f"{d['runs_differing']} runs" + (f", from step {d['first_step']:,}" if d["first_step"] else "") + ".", ""]
    if d["differ"]:
        lines += [f"Relative differences from {d['smallest_relative']:.2g} to {d['largest_relative']:.2g}. Per "
                  "metric: " + ", ".join(f"{k} {v:,}" for k, v in d["per_metric"].items()) + ".", ""]
    if "run_to_run" in report:
        again = report["run_to_run"]
        lines += [f"The one-batch sweep trained again on the same machine: {again['differ']:,} of {again['values']:,} "
                  f"values differ, in {again['runs_differing']} runs.", ""]
    lines += ["| sweep | method | best setting | area (95% CI) | tied with the best |", "|---|---|---|---|---|"]
    for name, rows in (("one batch", one), (f"{report['options']['batches']} batches", three)):
        for r in rows:
            lines.append(f"| {name} | {r['method']} | {r['best']} | {r['auc']:.4g} ({r['auc_low']:.4g}, "
                         f"{r['auc_high']:.4g}) | {', '.join(r['tied']) or 'none'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="compare two trained sweep folders")
    parser.add_argument("--seeds", type=int, default=PRESET["seeds"])
    parser.add_argument("--steps", type=int, default=PRESET["static"]["total_steps"])
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--static", type=json.loads, default={}, help="more static options, as JSON (for tests)")
    parser.add_argument("--again", action="store_true", help="train the one-batch sweep twice (run-to-run noise)")
    args = parser.parse_args(argv)
    if args.compare:
        found = differences(*args.compare)
        print(json.dumps({"compared": [str(p) for p in args.compare], **found}, indent=1))
        return found
    if args.out is None:
        parser.error("--out is required (or --compare A B)")
    preset = {**PRESET, "seeds": args.seeds, "static": {**PRESET["static"], "total_steps": args.steps, **args.static}}
    runs = args.seeds * sum(math.prod(len(v) for v in g["grid"].values()) for g in preset["grids"])
    seconds = {}
    sweeps = [("one", runs), ("three", math.ceil(runs / args.batches))] + ([("again", runs)] if args.again else [])
    for name, most in sweeps:
        started = time.monotonic()
        opiq_jax.sweep(preset, out=args.out / name, max_batch_runs=most, progress=False)
        seconds[name] = round(time.monotonic() - started, 1)
    import jax

    device = jax.local_devices()[0].device_kind
    report = {"options": {"preset": preset, "batches": args.batches, "runs": runs}, "device": device,
              "differences": differences(args.out / "one", args.out / "three"),
              "selections": [selection(args.out / "one"), selection(args.out / "three")]}
    if args.again:
        report["run_to_run"] = differences(args.out / "one", args.out / "again")
    for name, _ in sweeps:
        keep_small(args.out / name)
    (args.out / "comparison.json").write_text(json.dumps(report, indent=1))
    (args.out / "comparison.md").write_text(markdown(report))
    (args.out / "run_info.json").write_text(json.dumps({"device": device, "sweep_seconds": seconds}, indent=1))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
