"""What BSP's fixed prior costs a training step, and what its table per cell wins back, timed side by side.

BSP adds to every head a fixed random network of the Q-network's size (``Q_k + beta_bsp * p_k``). This trains the same
BSP program (the paper's maze setting, bfloat16) three ways, each in a process of its own, one after another on
the same device:

* ``network``: the prior network on every batch (``--prior-values network``, the only way before the table);
* ``table``: the prior's values per cell, computed once and looked up (``--prior-values table``);
* ``none``: the prior left out altogether (``head_values`` returns the heads' own values): not BSP, an upper bound
  on what any faster prior could give.

Each variant writes a results folder ``OUT/<variant>`` (``config.json``, ``run_info.json``, metrics); the script
then writes ``OUT/summary.md`` and ``summary.json`` with each variant's environment steps per second over its timed
chunks (compiling excluded). Run: ``python -m experiments.bsp_prior_cost --out results/bsp-prior-cost``.

Reaches inside: opiq_jax.parts, to replace BSP's head_values for the bound without a prior.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import tyro

if not __package__:  # run by path: import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = ("network", "table", "none")


@dataclasses.dataclass
class Args:
    out: Path
    """Folder of the three results folders and the summary."""
    env: str = "maze"
    """Environment with a cell table (maze, chain)."""
    seeds: int = 48
    """BSP runs in the program (as many as the maze_baselines sweep's BSP program: 6 settings x 8 seeds)."""
    steps: int = 20_000
    """Environment steps per run (two chunks at the maze's log interval)."""
    variants: tuple[str, ...] = VARIANTS
    """Which of network, table, none to train."""
    variant: str | None = None
    """Internal: train this one variant in this process (the script starts one process per variant)."""


def train_variant(args: Args, variant: str) -> None:
    """Trains the BSP program of ``variant`` into ``args.out / variant``."""
    import opiq_jax
    from opiq_jax.parts import bsp

    if variant == "none":  # not BSP: the upper bound of a prior that costs nothing
        bsp.Bsp.head_values = lambda self, agent, run, q, obs, cells: q
    opiq_jax.train(env=args.env, methods=["bsp"], seeds=args.seeds, steps=args.steps, precision="bfloat16",
                   prior_values="network" if variant == "none" else variant, out=args.out / variant,
                   progress=False, checkpoint_every=1e9)


def rate_of(folder: Path) -> dict:
    """The variant's device and rate from its run_info.json (``env_steps_per_second``: over the timed chunks)."""
    info = json.loads((folder / "run_info.json").read_text())
    return {key: info[key] for key in ("device", "runs", "steps_done", "chunk_seconds", "env_steps_per_second")}


def summary_markdown(rates: dict[str, dict]) -> str:
    """The variants side by side, each against the prior network."""
    base = rates.get("network", {}).get("env_steps_per_second")
    lines = ["| variant | device | runs | env steps/s (timed chunks) | against the prior network |", "|---|---|---|---|---|"]
    for name, rate in rates.items():
        ratio = f"{rate['env_steps_per_second'] / base:.2f}x" if base else "-"
        lines.append(f"| {name} | {rate['device']} | {rate['runs']} | {rate['env_steps_per_second']:,.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(args: Args) -> None:
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"bsp_prior_cost: unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    if args.variant is not None:
        train_variant(args, args.variant)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for variant in args.variants:
        command = [sys.executable, "-m", "experiments.bsp_prior_cost", "--out", str(args.out), "--env", args.env,
                   "--seeds", str(args.seeds), "--steps", str(args.steps), "--variant", variant]
        subprocess.run(command, check=True, cwd=Path(__file__).resolve().parents[1])
    rates = {variant: rate_of(args.out / variant) for variant in args.variants}
    (args.out / "summary.json").write_text(json.dumps(rates, indent=1))
    (args.out / "summary.md").write_text(summary_markdown(rates))
    print(summary_markdown(rates))


if __name__ == "__main__":
    main(tyro.cli(Args))
