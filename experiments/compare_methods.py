"""Every method of the paper on the chain (Figure 3, distinct states in the appendix) or the maze
(Figures 4 and 5: episode reward and distinct states visited against the baselines and the ablations).

All methods that differ only in numbers run side by side as one compiled, vmapped program
(methods x seeds on the runs axis); DORA (and DORA OA), RND and BSP each run as a program of their
own, in a subfolder of ``--out``, with the same seeds. Writes into ``--out``:

* ``<env>_baselines_<metric>.png``: OPIQ against the baselines (chain: Figure 3 left; maze: Figure 4);
* ``<env>_ablations_<metric>.png``: OPIQ against its ablations (chain: Figure 3 right; maze: Figure 5);
  metrics: training episode return, greedy test return and distinct states visited (the number of
  states drawn as a dotted line);
* ``summary.md`` / ``summary.json``: final median (25%, 75%) and area under the median curve per method;
* the results folder of the run itself (``config.json``, ``metrics.csv``, checkpoints).

Run: ``python -m experiments.compare_methods --env chain --out results/chain`` (the paper: 20 seeds,
100k steps) or ``--env maze`` (the paper: 8 seeds, 1M steps). With ``--max-minutes`` it stops cleanly
and the same command resumes; the figures and tables are drawn after every invocation, from whatever
has run (the tables' ``last step`` column says how far each method got).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jax
import tyro

from opiq_jax.environments import method_hparams, static_for_env
from opiq_jax.plotting import curves, markdown_table, save_curve_figure, summary_table
from opiq_jax.runner import Experiment, RunSpec, atomic_write_bytes, is_finished, read_metrics, run_methods

BASELINES = ("opiq", "dqn", "dqn_pc", "dqn_bias", "dqn_bias_pc", "dqn_rsubtract", "dqn_rsubtract_pc",
             "dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp")
ABLATIONS = ("opiq", "opiq_no_ob", "opiq_no_pc")


PAPER = {"chain": dict(seeds=20, steps=100_000, log_every=1_000), "maze": dict(seeds=8, steps=1_000_000, log_every=10_000)}


@dataclass
class Args:
    env: Literal["chain", "maze"] = "chain"
    """Environment."""
    out: Path | None = None
    """Results folder (default results/<env>-<count_features>; resumed if it holds the same experiment)."""
    seeds: int | None = None
    """Seeds per method (paper: 20 chain, 8 maze)."""
    steps: int | None = None
    """Environment steps per run (paper: 100k chain, 1M maze)."""
    log_every: int | None = None
    """Steps between metric rows (default 1k chain, 10k maze)."""
    count_features: Literal["simhash", "exact"] = "simhash"
    """simhash: the paper's SimHash codes (k = 32 chain, 128 maze); exact: the environment's cell id."""
    chain_length: int = 100
    """Chain states (chain only)."""
    precision: Literal["float32", "bfloat16"] = "float32"
    """The Q-network's precision: float32 (the paper) or bfloat16 (mixed precision for throughput: float32 weights
    and optimiser, bfloat16 forward and backward passes and target network; see StaticConfig.precision)."""
    maze_torso: Literal["auto", "xla", "pallas"] = "auto"
    """The maze network's convolutions: XLA's patch GEMMs, the Pallas kernels, or auto (Pallas on GPUs in
    bfloat16; see StaticConfig.maze_torso)."""
    target_values: Literal["auto", "table", "network"] = "auto"
    """The bootstrap targets' target-network values: looked up in a table of every cell filled at each target
    copy (chain, maze), the target network on every batch, or auto (the table in bfloat16; see
    StaticConfig.target_values)."""
    methods: tuple[str, ...] = tuple(dict.fromkeys(BASELINES + ABLATIONS))
    """Methods to run."""
    progress: bool = True
    """Show a progress bar."""
    max_minutes: float | None = None
    """Stop cleanly (checkpoint written) after this many minutes; run the same command again to resume."""
    checkpoint_minutes: float = 5.0
    """Minutes between checkpoints."""


def resolve(args: Args) -> Args:
    """Fills the options left unset with the paper's values for the environment."""
    paper = PAPER[args.env]
    return dataclasses.replace(
        args, seeds=args.seeds or paper["seeds"], steps=args.steps or paper["steps"],
        log_every=args.log_every or paper["log_every"],
        out=args.out or Path("results") / f"{args.env}-{args.count_features}",
    )


def build(args: Args) -> Experiment:
    extra = dict(chain_length=args.chain_length) if args.env == "chain" else {}
    static = static_for_env(args.env, total_steps=args.steps, log_every=args.log_every,
                            count_features=args.count_features, precision=args.precision,
                            maze_torso=args.maze_torso, target_values=args.target_values, **extra)
    runs = tuple(RunSpec(m, "paper", s, method_hparams(args.env, m)) for m in args.methods for s in range(args.seeds))
    return Experiment(static, runs)


def report(out: Path, env: str, count_features: str, num_states: int) -> None:
    rows = read_metrics(out)
    features = "exact state counts" if count_features == "exact" else f"SimHash k={32 if env == 'chain' else 128}"
    for metric in ("train_return", "test_return", "states_visited"):
        hline = num_states if metric == "states_visited" else None
        metric_curves = curves(rows, metric)
        for name, groups in (("baselines", BASELINES), ("ablations", ABLATIONS)):
            save_curve_figure(out / f"{env}_{name}_{metric}.png", metric_curves, metric,
                              f"{env} ({features}): OPIQ vs {name}", list(groups), hline)
    tables = {m: summary_table(rows, m) for m in ("train_return", "test_return", "states_visited")}
    text = "\n\n".join(f"### {m}\n\n{markdown_table(t, m)}" for m, t in tables.items())
    (out / "summary.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps(tables, indent=1))
    print(text)


def record_invocation(info_path: Path, seconds: float, **fields) -> dict:
    """Appends one invocation's wall-clock to ``run_info.json``, written atomically.

    A record in another shape (edited by hand, or unreadable) is kept under ``earlier`` and a new
    list of invocations starts; ``fields`` describe the latest invocation.
    """
    try:
        info = json.loads(info_path.read_text()) if info_path.exists() else {}
    except json.JSONDecodeError:
        info = {"earlier": info_path.read_text()}
    previous = info.get("seconds_per_invocation", [])
    if not isinstance(previous, list) or not all(isinstance(s, (int, float)) for s in previous):
        info["earlier"] = [info["earlier"], previous] if "earlier" in info else previous
        previous = []
    info["seconds_per_invocation"] = [*previous, seconds]
    info.update(fields, total_seconds=sum(info["seconds_per_invocation"]))
    atomic_write_bytes(info_path, json.dumps(info, indent=1).encode())
    return info


def main(argv: list[str] | None = None) -> None:
    args = resolve(tyro.cli(Args, args=argv))
    experiment = build(args)
    started = time.time()
    run_methods(experiment, args.out, progress=args.progress, checkpoint_seconds=60 * args.checkpoint_minutes,
                max_seconds=None if args.max_minutes is None else 60 * args.max_minutes)
    seconds = time.time() - started
    device = jax.devices()[0].device_kind
    print(f"{args.env}: {len(experiment.runs)} runs x {args.steps} steps in {seconds:.0f} s on {device}")
    record_invocation(args.out / "run_info.json", seconds, device=device, runs=len(experiment.runs), steps=args.steps)
    if not is_finished(args.out):  # the figures and tables still show what has run (their 'last step' says how far)
        print(f"{args.env}: stopped before the end; run the same command again to resume from {args.out}")
    report(args.out, args.env, args.count_features, args.chain_length if args.env == "chain" else 340)


if __name__ == "__main__":
    main()
