"""Value maps of the maze: the paper's Figure 6 (values used for acting) and its appendix figure of
the values used for bootstrapping.

DQN + PC and OPIQ (the paper's maze settings, ``methods.method_hparams("maze", ...)``: OPIQ with
M = 2, C_action = 100, C_bootstrap = 0.01, both with pseudocounts beta = 0.1) train on the maze with
the same seed, as one experiment of two runs (one compiled, vmapped program; the same seed gives both
the same network initialisation, SimHash matrix and action randomisation). From the final state,
for each of the 340 open cells ``s`` and each of the 4 actions ``a`` (the network's outputs, the
actions as the agent sees them; action ``a`` performs base move ``action_map[row, col, a]``, a
different move in every cell):

* values used for acting: ``Q(s, a) + C_action / (N(s, a) + 1)^M`` with the run's own ``C_action``
  and ``M``: plain ``Q`` for DQN + PC (``C_action = 0``), ``Q+`` for OPIQ;
* values used for bootstrapping: ``Q_target(s, a) + C_bootstrap / (N(s, a) + 1)^M`` (target
  network); drawn for every run with ``C_bootstrap > 0`` (OPIQ);

with ``N(s, a)`` read from the run's own count sketch, exactly as the agent reads it while acting.
The target network is a copy of the online one taken every 1,000 steps, so when ``--steps`` is a
multiple of 1,000 the two are equal at the end and the bootstrap maps are Q plus a small bonus.

Each figure is a 2x2 grid of 24x24 maps, one per action: values from 0 (black) to 10 (white),
clipped; walls in brown; the cells the run has visited (start included) in blue, drawn over the
values as in the paper (``--visited-alpha`` below 1 lets the values show through); S marks the
start, G the goal. Writes into ``--out``:

* the results folder of the run itself (``config.json``, ``metrics.csv``, ``checkpoint.msgpack``);
  running the same command again resumes an interrupted run, or only redraws a finished one;
* ``maze_values_dqn_pc.png``, ``maze_values_opiq.png`` (acting; one per method) and
  ``maze_bootstrap_values_opiq.png`` (bootstrapping; one per method with ``C_bootstrap > 0``);
* ``values.npz``: the raw arrays (see :func:`save_values`);
* ``value_maps_info.json``: device, wall-clock time per invocation, steps, seed, files.

Run: ``python -m experiments.paper.maze_value_maps --out results/maze-value-maps`` (the default 10k steps
take about 1.5 minutes on a quiet 2-core CPU, compile included; ``--steps 200000`` or more on a GPU).
With the paper's opaque blue, OPIQ's maps show little more than white (Q+ >= 100 at every
never-tried pair) around the visited region, and once OPIQ has visited all 340 cells (about 200k
steps in our maze runs) they are all blue: ``--visited-alpha 0.35`` shows the values underneath.

Uses only the public API: ``opiq_jax.train``, ``Results.cell_values`` (each run's Q-network, target network and
counts at every cell, as the agent reads them, and the values it acts on and bootstraps from), ``Results.state``
(the cells visited, the action map), the maze's layout from ``opiq_jax.envs.maze`` and ``opiq_jax.reporting``.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

# Run by path (python experiments/paper/maze_value_maps.py): import as python -m does, from the root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax
import numpy as np
import tyro

from opiq_jax import train
from opiq_jax.envs.maze import MAZE_GOAL, MAZE_SIZE, MAZE_START, Maze
from opiq_jax.reporting import paper_name, precision_text
from experiments.tools.command_line import command_line

BASE_METHODS = ("dqn_pc", "opiq")
# Methods that differ from these only in numbers (HParams), so all share one compiled program; methods
# with networks of their own (DORA, RND, BSP) would need another program and are not drawn here.
PLAIN_METHODS = ("dqn", "dqn_pc", "dqn_rsubtract", "dqn_rsubtract_pc", "dqn_bias", "dqn_bias_pc", "opiq", "opiq_no_ob",
                 "opiq_no_pc")
NUM_CELLS = MAZE_SIZE * MAZE_SIZE

# Colours of the maps (RGB in [0, 1]); values are grey levels from black (0) to white (vmax).
VISITED_RGB = (0.12, 0.35, 0.95)
WALL_RGB = (0.55, 0.33, 0.15)
INFO_FILE = "value_maps_info.json"
VALUES_FILE = "values.npz"


@dataclass
class Args:
    out: Path | None = None
    """Results folder (default results/maze-value-maps-steps<N>-seed<S>; resumed if it holds the same experiment)."""
    steps: int = 10_000
    """Environment steps per run (about 1.5 minutes on a 2-core CPU; try 200000 or more on a GPU)."""
    log_every: int | None = None
    """Steps per compiled chunk (one metrics row per chunk); default the largest of 10k, 5k, 2k, 1k, 500 dividing
    --steps."""
    seed: int = 0
    """Seed shared by all runs (same network initialisation, SimHash matrix and action randomisation)."""
    methods: tuple[str, ...] = ()
    """Further methods to run and draw besides dqn_pc and opiq (each with the paper's maze setting): any of
    dqn, dqn_rsubtract, dqn_rsubtract_pc, dqn_bias, dqn_bias_pc, opiq_no_ob, opiq_no_pc."""
    count_features: Literal["simhash", "exact"] = "simhash"
    """simhash: the paper's 128-bit SimHash of the observation; exact: the maze's cell id."""
    buffer_size: int | None = None
    """Replay capacity per run (default the paper's 250k)."""
    vmax: float = 10.0
    """Value drawn white (the paper: 10); values are clipped to [0, vmax]."""
    visited_alpha: float = 1.0
    """Opacity of the blue drawn over visited cells (1: the paper, values of visited cells hidden)."""
    progress: bool = True
    """Show a progress bar."""
    max_minutes: float | None = None
    """Stop cleanly (checkpoint written) after this many minutes; run the same command again to resume."""
    checkpoint_minutes: float = 5.0
    """Minutes between checkpoints."""


# ------------------------------------------------------------------------------------ experiment


def default_log_every(steps: int) -> int:
    """The largest of 10k, 5k, 2k, 1k, 500 that divides ``steps``, else the largest divisor of ``steps`` up to 10k."""
    for d in (10_000, 5_000, 2_000, 1_000, 500):
        if steps % d == 0:
            return d
    return max(d for d in range(1, min(steps, 10_000) + 1) if steps % d == 0)


def methods_of(args: Args) -> tuple[str, ...]:
    return tuple(dict.fromkeys(BASE_METHODS + tuple(args.methods)))


def options(args: Args) -> dict[str, Any]:
    """The experiment's options for ``opiq_jax.train`` (every method once, with the paper's maze setting)."""
    overrides = {} if args.buffer_size is None else dict(buffer_size=args.buffer_size)
    return dict(steps=args.steps, log_every=args.log_every or default_log_every(args.steps),
                count_features=args.count_features, **overrides)


def cell_rc(cell_ids) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of cell ids ``row * 24 + col``."""
    cell_ids = np.asarray(cell_ids)
    return cell_ids // MAZE_SIZE, cell_ids % MAZE_SIZE


def to_maps(per_cell, walls: np.ndarray) -> np.ndarray:
    """``[..., 576, A]`` per cell id -> ``[..., A, 24, 24]`` maps, NaN on walls (float64)."""
    per_cell = np.asarray(per_cell, np.float64)
    lead, actions = per_cell.shape[:-2], per_cell.shape[-1]
    assert per_cell.shape[-2] == NUM_CELLS, per_cell.shape
    maps = np.moveaxis(per_cell.reshape(*lead, MAZE_SIZE, MAZE_SIZE, actions), -1, -3)
    return np.where(walls, np.nan, maps)


def map_rgb(values: np.ndarray, walls: np.ndarray, visited: np.ndarray, vmax: float = 10.0,
            visited_alpha: float = 1.0) -> np.ndarray:
    """One 24x24 map as RGB float[24, 24, 3].

    Open cells: grey level ``clip(value / vmax, 0, 1)`` (0 black, ``vmax`` white; NaN black);
    visited open cells: blended towards blue with ``visited_alpha`` (1: pure blue); walls: brown.
    """
    grey = np.clip(np.nan_to_num(np.asarray(values, np.float64) / vmax, nan=0.0), 0.0, 1.0)
    rgb = np.repeat(grey[..., None], 3, axis=-1)
    blue = np.broadcast_to(np.asarray(VISITED_RGB), rgb.shape)
    rgb = np.where(np.asarray(visited, bool)[..., None], (1 - visited_alpha) * rgb + visited_alpha * blue, rgb)
    return np.where(np.asarray(walls, bool)[..., None], np.asarray(WALL_RGB), rgb)


# ------------------------------------------------------------------------------------ drawing


def draw_maps(path: Path, maps: np.ndarray, walls: np.ndarray, visited: np.ndarray, title: str,
              vmax: float = 10.0, visited_alpha: float = 1.0) -> Path:
    """Writes a 2x2 grid of per-action maps (``maps``: float[4, 24, 24], NaN on walls) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    actions = maps.shape[0]
    cols = 2 if actions == 4 else actions
    rows = -(-actions // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols + 1.2, 2.6 * rows + 1.0), squeeze=False,
                             layout="constrained")
    for a, ax in enumerate(axes.flat):
        if a >= actions:
            ax.axis("off")
            continue
        ax.imshow(map_rgb(maps[a], walls, visited, vmax, visited_alpha), interpolation="nearest")
        for (r, c), text in ((MAZE_START, "S"), (MAZE_GOAL, "G")):
            ax.text(c, r, text, ha="center", va="center", fontsize=7, fontweight="bold", color="#e8a000")
        ax.set_title(f"action {a}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    mappable = plt.cm.ScalarMappable(norm=matplotlib.colors.Normalize(0.0, vmax), cmap="gray")
    fig.colorbar(mappable, ax=axes, shrink=0.8, label=f"value (clipped to [0, {vmax:g}])")
    handles = [Patch(color=VISITED_RGB, label="visited"), Patch(color=WALL_RGB, label="wall"),
               Line2D([], [], ls="", marker="$S$", color="#e8a000", label="start"),
               Line2D([], [], ls="", marker="$G$", color="#e8a000", label="goal")]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_label(method: str) -> str:
    return paper_name(method)


def run_line(step: int, seed: int, precision: str, visited: int, open_cells: int) -> str:
    """The maps' second title line: the one run drawn (its seed and step), its precision (bfloat16 learns
    differently on the maze), and how much of the maze it has seen. One run, so no statistic across seeds."""
    return f"one run: seed {seed}, step {step:,}, {precision}; {visited} of {open_cells} cells visited (blue)"


def acting_title(method: str, c_action: float, m: float, line: str) -> str:
    what = (f"Q+(s, a) = Q(s, a) + {c_action:g} / (N(s, a) + 1)^{m:g}" if c_action > 0 else "Q(s, a)")
    return f"{run_label(method)}: {what}, used for acting\n{line}"


def bootstrap_title(method: str, c_bootstrap: float, m: float, line: str) -> str:
    what = f"Q_target(s, a) + {c_bootstrap:g} / (N(s, a) + 1)^{m:g}"
    return f"{run_label(method)}: {what}, used for bootstrapping\n{line}"


# ------------------------------------------------------------------------------------ files


def save_values(path: Path, runs: Sequence[dict], values: dict[str, np.ndarray], visited: np.ndarray,
                walls: np.ndarray, action_map: np.ndarray, step: int) -> Path:
    """``values.npz``. Per-cell arrays are ``[runs, 576 cells, 4 actions]`` indexed by cell id
    ``row * 24 + col`` (float arrays NaN on walls, ``counts`` -1 on walls); ``*_maps`` are the same
    as ``[runs, 4 actions, 24, 24]``. Also: ``methods``, ``c_action``, ``c_bootstrap``, ``m``
    (per run), ``visited`` (bool[runs, 576]), ``walls`` (bool[24, 24]), ``action_map`` (int[runs, 24,
    24, 4]: the base move, 0 left 1 down 2 right 3 up, of each action in each cell), ``step``, ``seed``.
    ``runs`` are the runs of :attr:`opiq_jax.FinalState.runs` (each with its method, seed and hyperparameters).
    """
    wall_ids = walls.reshape(-1)
    arrays = {}
    for name in ("q", "q_target", "acting", "bootstrap"):
        per_cell = np.asarray(values[name], np.float32).copy()
        per_cell[:, wall_ids, :] = np.nan
        arrays[name] = per_cell
        arrays[f"{name}_maps"] = to_maps(per_cell, walls).astype(np.float32)
    n = np.asarray(values["counts"]).copy()
    n[:, wall_ids, :] = -1
    hp = [r["hparams"] for r in runs]
    np.savez_compressed(
        path, **arrays, counts=n, visited=visited, walls=walls, action_map=action_map,
        methods=np.array([r["method"] for r in runs]), seed=np.array([r["seed"] for r in runs]),
        c_action=np.array([float(h["c_action"]) for h in hp]),
        c_bootstrap=np.array([float(h["c_bootstrap"]) for h in hp]),
        m=np.array([float(h["m"]) for h in hp]), step=np.int64(step),
    )
    return path


# ------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> dict:
    args = tyro.cli(Args, args=argv, description=__doc__.split("\n\n")[0])
    unknown = [m for m in args.methods if m not in PLAIN_METHODS]
    if unknown:
        raise SystemExit(f"maze_value_maps: error: methods {unknown} are not drawn here (unknown, or networks of their "
                         f"own); use any of {', '.join(PLAIN_METHODS)}")
    if args.out is None:
        args.out = Path("results") / f"maze-value-maps-steps{args.steps}-seed{args.seed}"
    started = time.time()
    # One run per method, every one with the seed --seed (not runs 0, 1, ... under it).
    results = train("maze", methods_of(args), [args.seed], out=args.out, progress=args.progress,
                    checkpoint_every=60 * args.checkpoint_minutes, max_minutes=args.max_minutes, **options(args))
    train_seconds = time.time() - started

    final = results.state()
    values = results.cell_values()
    visited_ids, action_map = jax.device_get((final.state.stats.visited["states_visited"],
                                              final.state.env.params.action_map))
    step, static = final.step, results.config["static"]
    walls = np.asarray(Maze().walls)
    open_cells = int((~walls).sum())
    visited_ids = np.asarray(visited_ids)  # bool[runs, 576] by cell id
    visited_maps = visited_ids.reshape(-1, MAZE_SIZE, MAZE_SIZE) & ~walls
    files = []
    precision = precision_text([results.config])
    for i, run in enumerate(final.runs):
        method, seed, hp = run["method"], run["seed"], run["hparams"]
        line = run_line(step, seed, precision, int(visited_maps[i].sum()), open_cells)
        acting = to_maps(values["acting"][i], walls)
        files.append(draw_maps(args.out / f"maze_values_{method}.png", acting, walls, visited_maps[i],
                               acting_title(method, float(hp["c_action"]), float(hp["m"]), line),
                               args.vmax, args.visited_alpha))
        if float(hp["c_bootstrap"]) > 0:
            boot = to_maps(values["bootstrap"][i], walls)
            files.append(draw_maps(args.out / f"maze_bootstrap_values_{method}.png", boot, walls, visited_maps[i],
                                   bootstrap_title(method, float(hp["c_bootstrap"]), float(hp["m"]), line),
                                   args.vmax, args.visited_alpha))
    files.append(save_values(args.out / VALUES_FILE, final.runs, values, visited_ids, walls,
                             np.asarray(action_map), step))
    seconds = time.time() - started

    device = jax.devices()[0]
    info_path = args.out / INFO_FILE
    info = json.loads(info_path.read_text()) if info_path.exists() else {"seconds_per_invocation": [],
                                                                         "train_seconds_per_invocation": []}
    info["seconds_per_invocation"].append(seconds)
    info["train_seconds_per_invocation"].append(train_seconds)
    info.update(
        device=device.device_kind, platform=device.platform, devices=jax.device_count(), jax=jax.__version__,
        host=platform.node(),
        command=command_line("experiments.paper.maze_value_maps", argv),
        methods=[r["method"] for r in final.runs], seed=args.seed, steps=args.steps, step_drawn=step,
        log_every=static["log_every"], count_features=args.count_features,
        buffer_size=static["buffer_size"], total_seconds=sum(info["seconds_per_invocation"]),
        cells_visited={r["method"]: int(v.sum()) for r, v in zip(final.runs, visited_maps)},
        files=[p.name for p in files],
    )
    info_path.write_text(json.dumps(info, indent=1))
    print(f"maze value maps: {len(final.runs)} runs x {step:,} steps, {seconds:.0f} s "
          f"({train_seconds:.0f} s training, compile included) on {device.device_kind}")
    if not results.finished:
        print(f"maze value maps: stopped at step {step:,} of {args.steps:,}; the maps show that step. "
              f"Run the same command again to resume from {args.out}")
    for p in files + [info_path]:
        print(f"  wrote {p}")
    return info


if __name__ == "__main__":
    main()
