"""The appendix figure comparing M in {0.1, 0.5, 2, 10} on the chain, from a finished sweep.

Reads the folder written by ``opiq-jax sweep chain_opiq`` (or any sweep over ``m``), picks for each
M the setting with the largest area under the median curve of the selection metric (the paper's
protocol), and draws that setting's median and 25-75% band: ``m_comparison_<metric>.png`` for the
episode return and the greedy test return, plus ``m_comparison.md`` with the chosen settings.

Run: ``python -m experiments.paper.chain_m_comparison --sweep results/sweep-chain_opiq``

Uses only the public API: ``opiq_jax.train`` and ``opiq_jax.reporting``, the figures' own curve helpers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

# Run by path (python experiments/paper/chain_m_comparison.py): import as python -m does, from the root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tyro

import opiq_jax
from opiq_jax.reporting import area_under_median, curves, folder_title, paper_name, save_curve_figure


@dataclass
class Args:
    sweep: Path = Path("results/sweep-chain_opiq")
    """Folder of a finished sweep (holds batch_000/, ...)."""
    method: str = "opiq"
    """Method whose settings are compared."""
    metric: str = "test_return"
    """Selection metric (the paper's chain protocol: median test reward)."""


def m_of(setting: str) -> str:
    return next((part.split("=")[1] for part in setting.split(",") if part.startswith("m=")), "?")


def best_setting_per_m(rows: list[dict], method: str, metric: str) -> dict[str, str]:
    """For each M, the setting with the largest area under the median ``metric`` curve."""
    by_setting: dict[str, list[dict]] = {}
    for r in rows:
        if r["method"] == method:
            by_setting.setdefault(r["setting"], []).append(r)
    best: dict[str, tuple[float, str]] = {}
    for setting, setting_rows in by_setting.items():
        auc = area_under_median(next(iter(curves(setting_rows, metric).values())))
        m = m_of(setting)
        if m not in best or auc > best[m][0]:
            best[m] = (auc, setting)
    return {m: s for m, (_, s) in sorted(best.items(), key=lambda kv: float(kv[0]))}


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    try:
        results = opiq_jax.load(args.sweep)
    except opiq_jax.ResultsError:  # no folder, or no results in it
        results = None
    if results is None or not results.is_sweep:
        raise SystemExit(f"chain_m_comparison: error: {args.sweep} holds no sweep batches; "
                         "run opiq-jax sweep chain_opiq first")
    rows = results.metrics  # every batch's runs, the batches' padding left out
    chosen = best_setting_per_m(rows, args.method, args.metric)
    selected = [dict(r, method=f"M={m_of(r['setting'])}: {r['setting']}") for r in rows
                if r["method"] == args.method and r["setting"] in chosen.values()]
    title = folder_title(args.sweep, selected,
                         heading=f"{paper_name(args.method)}: best setting per M (by area under median {args.metric})")
    for metric in ("train_return", "test_return"):
        save_curve_figure(args.sweep / f"m_comparison_{metric}.png", curves(selected, metric), metric, title)
    table = ["| M | best setting |", "|---|---|"] + [f"| {m} | {s} |" for m, s in chosen.items()]
    (args.sweep / "m_comparison.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    print(f"chain_m_comparison: wrote {args.sweep}/m_comparison_*.png")


if __name__ == "__main__":
    main()
