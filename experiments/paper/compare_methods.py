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

Every option of ``opiq_jax.train`` (``--steps``, ``--log-every``, ``--count-features``, ``--precision``,
``--buffer-size``, hyperparameters such as ``--m``, ...) is an option here too, generated from its declaration
(``opiq_jax.options()``); left unset, each takes the environment's paper value.

Run: ``python -m experiments.paper.compare_methods --env chain --out results/chain`` (the paper: 20 seeds,
100k steps) or ``--env maze`` (the paper: 8 seeds, 1M steps). With ``--max-minutes`` it stops cleanly
and the same command resumes; the figures and tables are drawn after every invocation, from whatever
has run (the tables' ``last step`` column says how far each method got). ``--redraw --out <folder>`` only
draws the figures of a folder again (on any machine, from its metrics).

Uses only the public API: ``opiq_jax.share_device_memory`` (before JAX starts, as the opiq-jax command does),
``opiq_jax.train``, ``opiq_jax.options`` and ``opiq_jax.reporting``, for the figures' tables.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal

# Run by path (python experiments/paper/compare_methods.py): import as python -m does, from the root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from opiq_jax import share_device_memory

share_device_memory(sys.argv[1:])  # before JAX starts: with --programs parallel the programs' processes need the GPU

import jax  # noqa: E402
import tyro  # noqa: E402

import opiq_jax  # noqa: E402
from opiq_jax import train  # noqa: E402
from opiq_jax.reporting import (  # noqa: E402
    check_one_experiment,
    curves,
    folder_title,
    markdown_table,
    save_curve_figure,
    source_revision,
    summary_table,
)

BASELINES = ("opiq", "dqn", "dqn_pc", "dqn_bias", "dqn_bias_pc", "dqn_rsubtract", "dqn_rsubtract_pc",
             "dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp")
ABLATIONS = ("opiq", "opiq_no_ob", "opiq_no_pc")

PAPER_SEEDS = {"chain": 20, "maze": 8}
MAZE_OPEN_CELLS = 340

# This script's own options; every experiment option comes from its declaration (see option_fields).
OWN_FIELDS: list[tuple[str, Any, Any, str]] = [
    ("env", Literal["chain", "maze"], "chain", "Environment."),
    ("out", Path | None, None, ("Results folder (default results/<env>-<count_features>; resumed if it holds the "
                                "same experiment).")),
    ("seeds", int | None, None, "Seeds per method (paper: 20 chain, 8 maze)."),
    ("methods", tuple[str, ...], tuple(dict.fromkeys(BASELINES + ABLATIONS)), "Methods to run."),
    ("progress", bool, True, "Show a progress bar."),
    ("redraw", bool, False, ("Only redraw the figures from --out's metrics (its environment read from the folder): "
                             "no training, and the tables and run_info.json are left as they are.")),
    ("max_minutes", float | None, None, ("Stop cleanly (checkpoint written) after this many minutes; run the "
                                         "same command again to resume.")),
    ("checkpoint_minutes", float, 5.0, "Minutes between checkpoints."),
    ("programs", Literal["sequential", "parallel"], "sequential", ("The programs (the methods that differ only in "
     "numbers; DORA; RND; BSP): one after another, or at once, each in a process of its own (on one GPU faster "
     "only under NVIDIA MPS: nvidia-cuda-mps-control -d).")),
]
# env_arg configures gymnax environments only; this script runs the chain and the maze.
NOT_HERE = ("env_arg",)


def option_fields() -> list[tuple[str, Any, Any]]:
    """A command-line field for every option ``opiq_jax.train`` takes, with the declaration's help and range;
    ``None`` (unset) leaves the environment's paper value (a yes/no option starts at its default)."""
    fields = []
    for name, option in opiq_jax.options().items():
        if name in NOT_HERE:
            continue
        kind = Literal[option.choices] if option.choices is not None else option.type  # type: ignore[valid-type]
        default = option.default if option.type is bool else None
        if option.type is not bool:
            kind = kind | None
        fields.append((name, Annotated[kind, tyro.conf.arg(help=option.help(default_text(option)),
                                                           help_behavior_hint="")], dataclasses.field(default=default)))
    return fields


def default_text(option) -> str | None:
    """What leaving ``option`` unset means, for its help: a hyperparameter keeps each method's paper setting."""
    if option.name in HYPERPARAMETERS:
        return "the method's paper setting for the environment"
    return "the environment's paper value" if option.environment_default else None  # None: the declared default


HYPERPARAMETERS = frozenset(opiq_jax.options("hyperparameters"))
OPTION_FIELDS = option_fields()
OPTION_NAMES = tuple(name for name, *_ in OPTION_FIELDS)


def script_args(own_fields: list[tuple[str, Any, Any, str]], doc: str) -> type:
    """A script's arguments: its own fields ``(name, type, default, help)``, then every option of ``opiq_jax.train``
    (:data:`OPTION_FIELDS`); ``doc``'s first paragraph is the command's description."""
    args = dataclasses.make_dataclass(
        "Args", [(n, Annotated[t, tyro.conf.arg(help=h)], dataclasses.field(default=d)) for n, t, d, h in own_fields]
        + OPTION_FIELDS)
    args.__doc__ = doc.split("\n\n")[0]
    return args


Args = script_args(OWN_FIELDS, __doc__)


def options_given(args) -> dict[str, Any]:
    """The experiment options set on the command line, by their names in ``opiq_jax.train``."""
    declared = opiq_jax.options()
    return {name: getattr(args, name) for name in OPTION_NAMES
            if getattr(args, name) is not None and getattr(args, name) != (
                declared[name].default if declared[name].type is bool else None)}


def resolve(args):
    """Fills the script's own options left unset: the paper's seeds for the environment, the default folder."""
    features = args.count_features or "simhash"
    return dataclasses.replace(args, seeds=args.seeds or PAPER_SEEDS[args.env],
                               out=args.out or Path("results") / f"{args.env}-{features}")


def draw_figures(results: opiq_jax.Results) -> None:
    """The figures (baselines, ablations) of every headline metric, from whatever has run."""
    out, rows = results.folder, results.metrics
    # The configs as plotting reads them, not results.config: that needs every program's parts, which configs
    # written before programs named their parts lack (the committed maze-all and chain-all folders).
    static = check_one_experiment(out, pooled=True)[0][0]["static"]
    env = static["env"]
    num_states = static["chain_length"] if env == "chain" else MAZE_OPEN_CELLS
    features = ("exact state counts" if static["count_features"] == "exact"
                else f"SimHash k={static['simhash_bits']} counts")
    figures = {"baselines": BASELINES, "ablations": ABLATIONS}
    titles = {name: folder_title(out, rows, heading=f"OPIQ vs {name} ({features})") for name in figures}
    for metric in ("train_return", "test_return", "states_visited"):
        hline = num_states if metric == "states_visited" else None
        metric_curves = curves(rows, metric)
        for name, groups in figures.items():
            save_curve_figure(out / f"{env}_{name}_{metric}.png", metric_curves, metric, titles[name], list(groups),
                              hline, hline_label=f"all {num_states} states")


def report(results: opiq_jax.Results) -> None:
    """The figures and tables of every headline metric, from whatever has run."""
    draw_figures(results)
    rows, out = results.metrics, results.folder
    tables = {m: summary_table(rows, m) for m in ("train_return", "test_return", "states_visited")}
    text = "\n\n".join(f"### {m}\n\n{markdown_table(t, m)}" for m, t in tables.items())
    (out / "summary.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps(tables, indent=1))
    print(text)


def atomic_write_text(path: Path, text: str) -> None:
    """Writes ``path`` through a temporary file and a rename, so that a kill mid-write leaves the old file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)

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
    atomic_write_text(info_path, json.dumps(info, indent=1))
    return info


def main(argv: list[str] | None = None) -> None:
    args = resolve(tyro.cli(Args, args=argv))
    if args.redraw:  # a committed folder's figures, drawn again by today's plotting (no device, no record)
        try:
            results = opiq_jax.load(args.out)
        except opiq_jax.ResultsError as e:
            raise SystemExit(f"compare_methods: error: {e}") from None
        draw_figures(results)
        return
    started = time.time()
    try:
        results = train(args.env, args.methods, args.seeds, out=args.out, progress=args.progress,
                        checkpoint_every=60 * args.checkpoint_minutes, max_minutes=args.max_minutes,
                        programs=args.programs, **options_given(args))
    except opiq_jax.UsageError as e:
        raise SystemExit(f"compare_methods: error: {e}") from None
    seconds = time.time() - started
    device = jax.devices()[0].device_kind
    runs, steps = len(results.config["runs"]), results.config["static"]["total_steps"]
    print(f"{args.env}: {runs} runs x {steps} steps in {seconds:.0f} s on {device}")
    record_invocation(args.out / "run_info.json", seconds, device=device, runs=runs, steps=steps, **source_revision())
    if not results.finished:  # the figures and tables still show what has run (their 'last step' says how far)
        print(f"{args.env}: stopped before the end; run the same command again to resume from {args.out}")
    report(results)


if __name__ == "__main__":
    main()
