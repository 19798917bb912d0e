"""Hard-exploration Atari games: OPIQ against DQN + PC, each game through ``--env atari:NAME`` (short runs).

The pool path serves any EnvPool Atari game with the paper's Montezuma settings (sticky actions, the full
action set, no life-loss terminal, a 4,500-step cap, the Nature network, 3-step targets, its epsilon schedule
and its best settings of every method). This runs the games of Bellemare et al.'s hard-exploration set
(Venture, Private Eye, Gravitar, Pitfall, Freeway, Solaris) side by side, one ``opiq-jax train`` process per
game on the same GPU (each given an equal share of the GPU's memory), and writes into ``--out``:

* ``<game>/``: the game's results folder as ``opiq-jax train`` writes it (``config.json``, ``metrics.csv``,
  ``run_info.json`` with the device and wall-clock, ``train_log.txt``), checkpoints left out with
  ``--drop-checkpoints``;
* ``<game>_max_return.png``, ``<game>_train_return.png``: median and 25-75 % band over the seeds;
* ``summary.md`` and ``summary.json``: per game and method, the final median of the maximum and of the
  training episode return with their quartiles, and the area under the median training return.

Runs no longer than ``--buffer-size`` steps never wrap their replay, so they train as with the paper's 1M
frames. Needs the Atari extra (``pip install -e '.[atari]'``) and the ROMs of the games. Run:
``python -m experiments.studies.atari_games --steps 50000 --seeds 3 --out results/atari``; ``--summarise`` only
rebuilds the figures and the summary of a finished ``--out`` (no EnvPool needed).

Reaches inside: opiq_jax.reporting.plotting, for the figures and the summary tables.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run by path (python experiments/studies/atari_games.py): import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tyro

from opiq_jax.reporting.plotting import curves, folder_title, save_curve_figure, summary_table
from opiq_jax.runs.results_folder import read_metrics
from opiq_jax.reporting import source_revision
from experiments.tools.command_line import command_line

HARD_EXPLORATION = ("Venture", "PrivateEye", "Gravitar", "Pitfall", "Freeway", "Solaris")
"""Bellemare et al. (2016)'s hard-exploration games besides Montezuma's Revenge."""
METRICS = ("max_return", "train_return")


@dataclass
class Args:
    out: Path = Path("results/atari")
    games: tuple[str, ...] = HARD_EXPLORATION
    """EnvPool's names of the games."""
    methods: tuple[str, ...] = ("opiq", "dqn_pc")
    seeds: int = 3
    steps: int = 50_000
    """Agent steps per run (the paper's Montezuma runs: 12.5M)."""
    log_every: int = 5_000
    buffer_size: int | None = None
    """Replay frames per run (default: --steps, at least 1,000; it never wraps, so a run trains as with the paper's
    1M frames)."""
    precision: str = "float32"
    drop_checkpoints: bool = False
    """Delete each game's checkpoint once it finished (a replay of frames: large, and of no use once done)."""
    summarise: bool = False
    """Only draw the figures and write the summary of a finished --out."""


def train_command(args: Args, game: str) -> list[str]:
    """The ``opiq-jax train`` command of one game (a stop writes a checkpoint; the same command resumes it)."""
    return [sys.executable, "-m", "opiq_jax", "train", "--env", f"atari:{game}", "--method", *args.methods,
            "--seeds", str(args.seeds), "--steps", str(args.steps), "--log-every", str(args.log_every),
            "--buffer-size", str(args.buffer_size or max(args.steps, 1_000)), "--precision", args.precision,
            "--checkpoint-every", "3600", "--no-plot", "--no-progress", "--out", str(args.out / game)]


def train_games(args: Args) -> dict[str, int]:
    """Every game's training at once, one process each with an equal share of the GPU's memory; the exit codes."""
    # Each process allocates what it uses (JAX would take 75 % of the GPU at start), at most its share.
    share = f"{0.9 / len(args.games):.3f}"
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": share}
    processes = {}
    for game in args.games:
        (args.out / game).mkdir(parents=True, exist_ok=True)
        log = open(args.out / f"{game}.log", "a", encoding="utf-8")  # noqa: SIM115 (closed with the process)
        processes[game] = (subprocess.Popen(train_command(args, game), stdout=log, stderr=subprocess.STDOUT, env=env),
                           log)
    codes = {}
    for game, (process, log) in processes.items():
        codes[game] = process.wait()
        log.close()
        shutil.move(args.out / f"{game}.log", args.out / game / "train_log.txt")
        if args.drop_checkpoints and codes[game] == 0:
            for checkpoint in (args.out / game).glob("checkpoint*"):
                checkpoint.unlink()
    return codes


def game_summary(folder: Path) -> dict:
    """Per method of one game's folder: the final median (25 %, 75 %) of each metric and the area under the
    median training return."""
    rows = read_metrics(folder)
    out = {}
    for metric in METRICS:
        for row in summary_table(rows, metric):
            entry = out.setdefault(row["group"], {"seeds": row["seeds"], "last_step": row["last_step"]})
            entry[metric] = [row["final_median"], row["final_q25"], row["final_q75"]]
            if metric == "train_return":
                entry["train_return_area"] = row["auc"]
    return out


def draw_game(out: Path, game: str) -> None:
    rows = read_metrics(out / game)
    title = folder_title(out / game, rows, heading=game)
    for metric in METRICS:
        save_curve_figure(out / f"{game}_{metric}.png", curves(rows, metric), metric, title)


def summary_markdown(summary: dict[str, dict]) -> str:
    lines = ["| game | method | seeds | steps | final max return: median (25 %, 75 %) | final training return: "
             "median (25 %, 75 %) | area under the median training return |", "|---|---|---|---|---|---|---|"]
    for game, methods in summary.items():
        for method, s in methods.items():
            lines.append(f"| {game} | {method} | {s['seeds']} | {s['last_step']:,} | {s['max_return'][0]:g} "
                         f"({s['max_return'][1]:g}, {s['max_return'][2]:g}) | {s['train_return'][0]:.3g} "
                         f"({s['train_return'][1]:.3g}, {s['train_return'][2]:.3g}) | {s['train_return_area']:.4g} |")
    return "\n".join(lines) + "\n"


def summarise(args: Args) -> str:
    summary = {}
    for game in args.games:
        if (args.out / game / "metrics.csv").exists():
            draw_game(args.out, game)
            summary[game] = game_summary(args.out / game)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = summary_markdown(summary)
    (args.out / "summary.md").write_text(text)
    return text


def record_call(path: Path, call: dict) -> None:
    """``run_info.json``: this call added to the folder's earlier ones (a game that failed is trained again by a
    later call with ``--games``), with the device and the wall-clock of them all."""
    earlier = json.loads(path.read_text()) if path.exists() else {"calls": []}
    calls = earlier.get("calls", [earlier])
    revision = source_revision()
    calls.append(call | revision)
    info = dict(command=call["command"], device=call["device"], seconds=sum(c["seconds"] for c in calls), calls=calls,
                **revision)
    path.write_text(json.dumps(info, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    if not args.summarise:
        started = time.monotonic()
        codes = train_games(args)
        devices = {json.loads(p.read_text())["device"] for p in args.out.glob("*/run_info.json")}
        call = dict(command=command_line("experiments.studies.atari_games", argv),
                    device=", ".join(sorted(devices)), seconds=time.monotonic() - started, exit_codes=codes)
        record_call(args.out / "run_info.json", call)
        if any(codes.values()):
            raise SystemExit(f"atari_games: some games failed: {codes} (each game's train_log.txt says why)")
    print(summarise(args))


if __name__ == "__main__":
    main()
