"""How large are an untrained Q-network's values under flax's initialisation and under PyTorch's default?

The authors' networks keep PyTorch's default (weights and biases uniform in ±1/sqrt(fan_in)); flax draws LeCun
normal weights (variance 1/fan_in, three times the uniform's 1/(3 fan_in)) and zero biases. Through a few ReLU
layers the factor compounds, so the two start Q at different scales, which matters on Montezuma, where the output
scale at the start decided whether |Q| ran past its bound (docs/choices.md).

For each of the paper's networks (the chain's MLP on the 100 thermometer codes, the maze's network on every open
cell, the Nature network on Montezuma's frames or on noise) and ``--keys`` initial draws of each initialisation,
this computes Q on every observation and records the mean and the largest |Q|. The ratio flax / pytorch is of the
medians over draws.

Run: ``python -m experiments.studies.initial_q_scale --out docs/results/initial-q-scale``.

Reaches inside: opiq_jax.primitives.networks, for the networks and both initialisations as the trainer builds them, and
opiq_jax.store.files, for its atomic writes.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

if not __package__:  # run by path: import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax
import jax.numpy as jnp
import numpy as np
import tyro

from opiq_jax.envs.chain import thermometer
from opiq_jax.envs.maze import Maze
from opiq_jax.primitives.networks import INITIALISATIONS, init_variables, make_network
from opiq_jax.reporting import source_revision
from opiq_jax.store.files import atomic_write_text


@dataclass
class Args:
    out: Path
    """Where initial_q_scale.json, initial_q_scale.md and run_info.json go."""
    keys: int = 16
    """Initial draws of each network under each initialisation."""
    frames: Literal["montezuma", "noise"] = "montezuma"
    """The Nature network's inputs: stacks of Montezuma's frames under random actions (EnvPool, the atari extra), or
    uniform noise."""
    frame_steps: int = 400
    """Stacks of frames the Nature network is evaluated on."""


def chain_observations() -> tuple[str, int, jax.Array]:
    return "mlp", 2, jax.vmap(lambda s: thermometer(s, 100))(jnp.arange(100))


def maze_observations() -> tuple[str, int, jax.Array]:
    maze = Maze()
    cells = jnp.asarray(np.argwhere(~maze.walls), jnp.int32)
    return "maze_conv", 4, jax.vmap(lambda c: maze.obs_from_compact(c, None))(cells)


def montezuma_frames(steps: int) -> np.ndarray:
    """``[steps, 84, 84, 4]`` uint8 stacks from one Montezuma emulator under uniformly random actions."""
    import envpool  # the atari extra

    env = envpool.make("MontezumaRevenge-v5", env_type="gymnasium", num_envs=1, seed=0, repeat_action_probability=0.25,
                       full_action_space=True, episodic_life=False, reward_clip=False)
    obs, _ = env.reset()
    stacks, rng = [], np.random.default_rng(0)
    for _ in range(steps):
        obs, *_ = env.step(rng.integers(0, 18, size=1))
        stacks.append(np.moveaxis(obs[0], 0, -1))  # EnvPool stacks frames first
    return np.stack(stacks)


def nature_observations(args: Args) -> tuple[str, int, jax.Array]:
    if args.frames == "montezuma":
        return "nature", 18, jnp.asarray(montezuma_frames(args.frame_steps))
    noise = np.random.default_rng(0).integers(0, 256, (args.frame_steps, 84, 84, 4), dtype=np.uint8)
    return "nature", 18, jnp.asarray(noise)


def q_statistics(name: str, outputs: int, obs: jax.Array, initialisation: str, keys: int) -> dict[str, list[float]]:
    """Per initial draw: the mean and the largest |Q| over every observation and action."""
    network = make_network(name, outputs)

    def one(key, obs):
        q = network.apply(init_variables(network, key, obs[:1], initialisation), obs)
        return jnp.abs(q).mean(), jnp.abs(q).max()

    # the observations are an argument, not a constant that XLA would fold at compile time
    means, maxima = jax.jit(jax.vmap(one, in_axes=(0, None)))(jax.random.split(jax.random.key(0), keys), obs)
    return {"mean_abs_q": np.asarray(means).tolist(), "max_abs_q": np.asarray(maxima).tolist()}


def network_row(env: str, name: str, outputs: int, obs: jax.Array, keys: int) -> dict:
    stats = {drawn: q_statistics(name, outputs, obs, drawn, keys) for drawn in INITIALISATIONS}
    medians = {drawn: float(np.median(stats[drawn]["mean_abs_q"])) for drawn in INITIALISATIONS}
    return {"env": env, "network": name, "observations": int(obs.shape[0]), "draws": stats,
            "median_mean_abs_q": medians, "ratio_flax_to_pytorch": medians["flax"] / medians["pytorch"]}


def table(rows: list[dict]) -> str:
    lines = ["| network (inputs) | median mean abs Q, flax | median mean abs Q, pytorch | flax / pytorch | "
             "largest abs Q over draws, flax / pytorch |", "|---|---|---|---|---|"]
    for row in rows:
        largest = {s: max(row["draws"][s]["max_abs_q"]) for s in INITIALISATIONS}
        lines.append(f"| {row['network']} ({row['env']}, {row['observations']} observations) | "
                     f"{row['median_mean_abs_q']['flax']:.4g} | {row['median_mean_abs_q']['pytorch']:.4g} | "
                     f"{row['ratio_flax_to_pytorch']:.2f} | {largest['flax']:.3g} / {largest['pytorch']:.3g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    if args.keys < 1 or args.frame_steps < 1:
        raise SystemExit("initial_q_scale: error: --keys and --frame-steps must be at least 1")
    started = time.monotonic()
    rows = [network_row("chain", *chain_observations(), args.keys),
            network_row("maze", *maze_observations(), args.keys),
            network_row(f"{args.frames} frames", *nature_observations(args), args.keys)]
    text = table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    command = ["python", "-m", "experiments.studies.initial_q_scale", *(argv if argv is not None else sys.argv[1:])]
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(args).items()}
    atomic_write_text(args.out / "initial_q_scale.json", json.dumps({"settings": settings, "rows": rows}, indent=1))
    atomic_write_text(args.out / "initial_q_scale.md", text + "\n")
    atomic_write_text(args.out / "run_info.json", json.dumps(
        {"command": command, "device": f"{jax.devices()[0].device_kind} ({platform.machine()}, "
         f"{jax.device_count()} device)", "date": time.strftime("%Y-%m-%d"),
         "seconds": round(time.monotonic() - started, 1), **source_revision()}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
