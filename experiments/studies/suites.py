"""OPIQ against the count-based and exploration baselines on a hard-exploration suite: MiniGrid, Craftax or MinAtar.

The five methods (OPIQ, DQN + PC, DQN + RND, epsilon-greedy DQN and BSP) train on one task, ``--seeds`` seeds each,
as few compiled programs as ``opiq_jax.train`` makes of them (the methods that differ only in numbers share one; RND
and BSP each add one; ``--programs parallel`` runs those at once, under NVIDIA MPS on one GPU). Each suite's
settings are the environment's own (``opiq-jax train --env ...`` prints them in ``config.json``). Writes into
``--out``, after every invocation, from whatever has run:

* ``suite_<metric>.png``: the median over seeds with its 25-75 % band, per method, for the greedy test return, the
  training return and the distinct states visited;
* ``summary.md`` / ``summary.json``: per metric and method, the final median with quartiles and the IQM of the
  seeds' areas with its 95 % bootstrap interval (``opiq_jax.reporting.summary_table``); then the suite's own score
  (:func:`suite_score`): MiniGrid's success rate, Craftax's return as a percentage of the most an episode can earn;
  then the published numbers the suite is read against (:data:`ANCHORS`), with what differs;
* ``run_info.json``: each invocation's wall-clock, the card, the runs and steps, the revision.

Run: ``python -m experiments.studies.suites --env minigrid:DoorKey-16x16 --steps 2000000``
(``craftax:Classic``, ``minatar:Breakout``, ...). With ``--max-minutes`` it stops cleanly and the same command
resumes. Every option of ``opiq_jax.train`` is an option here too (``--steps``, ``--count-features``,
``--precision``, ``--craftax-episode-steps``, ...); left unset, each takes the environment's value.

Uses the public API: ``opiq_jax.train``, ``opiq_jax.load`` and ``opiq_jax.reporting``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Literal

from opiq_jax import share_device_memory

share_device_memory(sys.argv[1:])  # before JAX starts: with --programs parallel the programs' processes need the GPU

import numpy as np  # noqa: E402
import tyro  # noqa: E402

import opiq_jax  # noqa: E402
from experiments.paper.compare_methods import (  # noqa: E402
    atomic_write_text,
    options_given,
    record_invocation,
    script_args,
)
from experiments.tools.command_line import command_line  # noqa: E402
from opiq_jax.reporting import (  # noqa: E402
    curves,
    folder_title,
    markdown_table,
    save_curve_figure,
    source_revision,
    summarise,
    summary_table,
)

METHODS = ("opiq", "dqn_pc", "dqn_rnd", "dqn", "bsp")
"""OPIQ, DQN + PC, DQN + RND, epsilon-greedy DQN and BSP: the methods every suite's results compare."""
METRICS = ("test_return", "train_return", "states_visited")

CRAFTAX_MAX_RETURN = {"Classic": 22.0, "Craftax": 226.0}
"""The most an episode can earn from its achievements (craftax 1.6.1: Classic's 22 achievements at 1 each;
Craftax's 67 weighted by ``craftax.craftax.constants.ACHIEVEMENT_REWARD_MAP``, which sums to 226), the unit of the
Craftax scoreboard ("% of the maximum reward")."""

ANCHORS = {
    "minigrid": (
        "NovelD (Zhang et al., 2021) and BeBold (Zhang et al., 2020) solve every static procedurally generated hard "
        "MiniGrid task within 120M environment steps, where the previous best solved half (their abstracts; the "
        "per-task curves are figures). RIDE (Raileanu and Rocktäschel, 2020, Figure 3) reaches about 0.9 on "
        "KeyCorridorS3R3 by about 10M frames. They are PPO/IMPALA agents trained for far more steps than here, so "
        "a comparison of budgets is inconclusive unless the budgets match."),
    "craftax": (
        "Craftax's scoreboard (Matthews et al., 2024), % of the maximum reward (226) on the full game with symbolic "
        "observations, at 1M and 1B environment steps: PPO-RNN 2.3 and 15.3, RND 2.2 and 12.0, ICM 2.2 and 11.9, "
        "E3B 2.2 and 11.0, PQN-RNN 16.0 at 1B. Those are policy-gradient agents (PQN a Q-learner) scored on their "
        "training episodes. Craftax-Classic has no scoreboard: its paper gives PPO about 90 % of the maximum at 1B "
        "steps. Intervals that overlap, budgets that differ, or the other game leave a comparison inconclusive."),
    "minatar": (
        "Young and Tian (2019) give DQN's returns after 5M frames (= steps) only as curves: about 17 on Asterix, 10 "
        "on Breakout, 50 on Freeway, 20 on Seaquest and 43 on Space Invaders, read from their figure (30 seeds, the "
        "mean of the last 100 training episodes at epsilon 0.1). They used all 6 actions and sticky actions (p = "
        "0.1); gymnax's games have the minimal action set, no sticky actions and a 1,000-step cap (Freeway's "
        "2,500). Compare at their budget and say what differs."),
}
"""The published numbers each suite's results are read against, with what differs from this project's runs."""


def suite_of(env: str) -> str:
    """``minigrid``, ``craftax`` or ``minatar`` for ``SUITE:TASK``; a one-line error for another environment."""
    suite = env.split(":", 1)[0]
    if suite not in ANCHORS or ":" not in env:
        raise SystemExit(f"suites: error: --env {env!r} is not a suite's task: give minigrid:NAME, craftax:NAME or "
                         "minatar:NAME")
    return suite


def final_values(rows: list[dict], metric: str) -> dict[str, np.ndarray]:
    """Per method: each seed's value of ``metric`` at the newest step logged; NaN for a seed with none there (not that
    far yet, or a return before any episode ended), which the scores leave out."""
    return {label: c["values"][:, -1] for label, c in curves(rows, metric).items()}


def suite_score(suite: str, env: str, rows: list[dict]) -> list[dict]:
    """The suite's own score per method, from the seeds' final greedy test returns:

    * MiniGrid: the success rate, the share of seeds whose greedy episode reached the goal (MiniGrid rewards only
      reaching it, with 1 - 0.9 x steps / limit, so a return above 0 is a success);
    * Craftax: the return as a percentage of :data:`CRAFTAX_MAX_RETURN`, the median and the IQM with its interval;
    * MinAtar: none (its games have no success; the returns are the score).
    """
    if suite == "minatar":
        return []
    table = []
    for method, values in final_values(rows, "test_return").items():
        if suite == "minigrid":
            finite = values[np.isfinite(values)]
            table.append(dict(method=method, seeds=int(finite.size),
                              success_rate=float(np.mean(finite > 0)) if finite.size else float("nan")))
            continue
        percent = summarise(100 * values / CRAFTAX_MAX_RETURN[env.split(":", 1)[1]])  # NaN seeds left out
        table.append(dict(method=method, seeds=percent["n"], median_percent=percent["median"],
                          iqm_percent=percent["iqm"], iqm_percent_low=percent["iqm_low"],
                          iqm_percent_high=percent["iqm_high"]))
    return table


def score_text(suite: str, table: list[dict]) -> str:
    """The suite's score as Markdown ('' where the suite has none)."""
    if suite == "minigrid":
        lines = ["| method | seeds | success rate of the final greedy episode |", "|---|---|---|"]
        lines += [f"| {t['method']} | {t['seeds']} | {t['success_rate']:.2f} |" for t in table]
    elif suite == "craftax":
        lines = ["| method | seeds | final greedy return, % of the maximum: median | IQM (95% CI) |",
                 "|---|---|---|---|"]
        lines += [f"| {t['method']} | {t['seeds']} | {t['median_percent']:.1f} | {t['iqm_percent']:.1f} "
                  f"({t['iqm_percent_low']:.1f}, {t['iqm_percent_high']:.1f}) |" for t in table]
    else:
        return ""
    return "\n".join(lines)


def report(results: opiq_jax.Results, env: str) -> dict:
    """Figures and tables of ``results`` (a folder of one suite's task), from whatever has run; returns the summary."""
    suite, rows, out = suite_of(env), results.metrics, results.folder
    title = folder_title(out, rows, heading=f"{env}: OPIQ and the baselines")
    tables = {m: summary_table(rows, m) for m in METRICS if any(r["metric"] == m for r in rows)}
    for metric in tables:
        save_curve_figure(out / f"suite_{metric}.png", curves(rows, metric), metric, title)
    score = suite_score(suite, env, rows)
    parts = [f"### {m}\n\n{markdown_table(t, m)}" for m, t in tables.items()]
    if score:
        parts.append(f"### {suite}'s score\n\n{score_text(suite, score)}")
    parts.append(f"### Published numbers to read it against\n\n{ANCHORS[suite]}")
    summary = dict(env=env, suite=suite, tables=tables, score=score, anchors=ANCHORS[suite])
    atomic_write_text(out / "summary.md", "\n\n".join(parts) + "\n")
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1))
    return summary


OWN_FIELDS: list[tuple[str, Any, Any, str]] = [
    ("env", str, "minigrid:DoorKey-16x16", "The suite's task: minigrid:NAME, craftax:Classic, craftax:Craftax or "
                                            "minatar:NAME."),
    ("out", Path | None, None, "Results folder (default results/suite-SUITE-TASK; resumed if it holds the same "
                               "experiment)."),
    ("methods", tuple[str, ...], METHODS, "The methods compared."),
    ("seeds", int, 8, "Seeds per method."),
    ("max_minutes", float | None, None, "Stop cleanly (a checkpoint written) after this many minutes; the same "
                                        "command resumes."),
    ("programs", Literal["sequential", "parallel"], "sequential", "The programs one after another, or at once, each "
     "in a process of its own (on one GPU faster only under NVIDIA MPS: nvidia-cuda-mps-control -d)."),
    ("progress", bool, True, "Show a progress bar."),
]
Args = script_args(OWN_FIELDS, __doc__)
"""This script's options, then every option of ``opiq_jax.train`` (left unset: the environment's value)."""


def default_out(env: str) -> Path:
    """``results/suite-minigrid-DoorKey-16x16`` for ``minigrid:DoorKey-16x16``."""
    return Path("results") / f"suite-{env.replace(':', '-')}"


def main(argv: list[str] | None = None) -> dict:
    args = tyro.cli(Args, args=argv)
    suite_of(args.env)
    if args.seeds < 1:
        raise SystemExit("suites: error: --seeds must be at least 1")
    out = args.out or default_out(args.env)
    import jax  # after the arguments are checked: a typo costs no backend start

    started = time.time()
    try:
        results = opiq_jax.train(args.env, args.methods, args.seeds, out=out, progress=args.progress,
                                 max_minutes=args.max_minutes, programs=args.programs, **options_given(args))
    except opiq_jax.UsageError as e:
        raise SystemExit(f"suites: error: {e}") from None
    seconds = time.time() - started
    device, runs = jax.devices()[0].device_kind, len(results.config["runs"])
    record_invocation(out / "run_info.json", seconds, device=device, runs=runs,
                      steps=results.config["static"]["total_steps"],
                      command=command_line("experiments.studies.suites", argv), **source_revision())
    if not results.finished:
        print(f"suites: stopped before the end; run the same command again to resume from {out}")
    summary = report(results, args.env)
    print((out / "summary.md").read_text())
    return summary


if __name__ == "__main__":
    main()
