"""How many of Montezuma's sampled transitions have an unknown Monte Carlo return, against the environments per run.

The mixed Monte Carlo target mixes in a return of 0 for a transition whose episode has not ended (the paper's
rule). With ``E`` environments per run, a run's 1M-frame replay is ``E`` rings of ``R = 1M / E`` frames, and each ring
holds its environment's running episode, whose returns are unknown. At a random time the running episode has
stored ``k`` transitions, where ``k`` is the age of a renewal process: ``P(k = j)`` is proportional to
``P(L > j)`` for episode lengths ``L``. Sampled uniformly from full rings, the share of unknown returns is then
``E[min(k, R)] / R``.

Two measurements, both on the CPU:

* **Episode lengths.** A raw EnvPool pool of Montezuma with the paper's settings plays uniformly random actions
  (the first 1M steps of every method act with epsilon above 0.01, most of them near random) for ``--steps``
  steps per environment; every episode that ended gives a length. From them the share for each ``E`` of
  ``--envs``, and for episodes that all last the 4,500-step cap (an agent that survives, as the late 5M-step runs
  often did: 5 to 32 episodes ended in a chunk of 1,250 steps per environment), the bound ``2250 / R``.
* **The trainer's own metric.** ``opiq-jax``'s pool path with ``E`` = ``--check-envs`` environments and a small
  replay whose rings fill within the run (``--check-buffer``), acting at random (ε-greedy DQN at ε = 1, a small
  MLP): its ``unknown_return_share`` over the chunks after the rings filled, against the model's prediction for
  that ring size from the same pool's episodes.

Run: ``python -m experiments.studies.unknown_returns --out docs/results/unknown-returns``. Writes ``summary.md``,
``summary.json`` and ``run_info.json`` (the command, the machine and the wall-clock).

Reaches inside: opiq_jax.envs.montezuma (the raw pool with the project's settings) and opiq_jax's API for the check.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from opiq_jax.reporting import source_revision
from experiments.tools.command_line import command_line

REPLAY = 1_000_000
CAP = 4500


@dataclass
class Args:
    out: Path
    """Where summary.md, summary.json and run_info.json go (created; existing files there are replaced)."""
    steps: int = 6_000
    """Random steps per environment of the episode-length pool."""
    pool: int = 64
    """Environments of the episode-length pool."""
    envs: tuple[int, ...] = (1, 8, 32, 64)
    """Environments per run to report."""
    check_envs: int = 8
    """Environments per run of the trainer's check."""
    check_buffer: int = 8_192
    """Replay of the trainer's check (rings of check_buffer / check_envs frames)."""
    check_steps: int = 48_000
    """Environment steps per run of the trainer's check."""
    seed: int = 0


def episode_lengths(num_envs: int, steps: int, seed: int) -> np.ndarray:
    """The lengths (agent steps) of every episode that ended in a random-action pool of Montezuma."""
    from opiq_jax.envs.montezuma import make_envpool

    env = make_envpool(num_envs, seed)
    env.reset()
    rng = np.random.default_rng(seed)
    running, lengths = np.zeros(num_envs, np.int64), []
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(rng.integers(0, env.action_space.n, num_envs))
        reset_step = np.asarray(info["elapsed_step"]) == 0  # EnvPool's step after an end: no transition
        running += ~reset_step
        ended = np.asarray(terminated) | np.asarray(truncated)
        lengths += running[ended].tolist()
        running[ended] = 0
    return np.asarray(lengths, np.int64)


def unknown_share(lengths: np.ndarray, ring: int) -> float:
    """E[min(k, ring)] / ring for the age k of the running episode of a renewal process of ``lengths`` (module
    docstring): P(k = j) is proportional to the share of episodes longer than j."""
    longest = int(lengths.max())
    survival = (lengths[None, :] > np.arange(longest)[:, None]).mean(axis=1)  # P(L > j), j = 0 .. longest - 1
    ages = np.minimum(np.arange(longest), ring)
    return float((survival * ages).sum() / survival.sum() / ring)


def trainer_check(args: Args, lengths: np.ndarray) -> dict:
    """The trainer's unknown_return_share with rings that fill, against the model's prediction."""
    import opiq_jax

    ring = args.check_buffer // args.check_envs
    log_every = 4_000
    results = opiq_jax.train(env="montezuma", methods=["dqn"], seeds=1, steps=args.check_steps, log_every=log_every,
                             envs_per_run=args.check_envs, buffer_size=args.check_buffer, network="mlp", hidden=(16,),
                             out=str(args.out / "check"), progress=False)
    rows = [r for r in results.metrics if r["metric"] == "unknown_return_share"]
    filled = 2 * ring  # every ring full, and refilled once: its episodes are no longer the first ones
    after = [float(r["value"]) for r in rows if int(r["step"]) // args.check_envs > filled]
    return {"envs_per_run": args.check_envs, "buffer_size": args.check_buffer, "ring": ring,
            "chunks_after_filling": len(after), "measured_share": float(np.mean(after)) if after else None,
            "predicted_share": unknown_share(lengths, ring)}


def markdown(args: Args, lengths: np.ndarray, shares: dict, check: dict) -> str:
    lines = [f"# Unknown Monte Carlo returns against the environments per run ({REPLAY:,}-frame replay)", "",
             f"Episodes of random play: {len(lengths)} (pool of {args.pool}, {args.steps:,} steps each): length "
             f"median {np.median(lengths):.0f}, mean {lengths.mean():.0f}, longest {lengths.max()}.", "",
             "| environments per run | ring (frames) | unknown share, random play | bound: every episode at the "
             f"{CAP:,}-step cap |", "|---|---|---|---|"]
    for e, (ring, random_share, capped) in shares.items():
        lines.append(f"| {e} | {ring:,} | {100 * random_share:.3g} % | {100 * capped:.3g} % |")
    lines += ["", f"The trainer's metric with E = {check['envs_per_run']} and rings of {check['ring']:,} frames "
              f"(replay {check['buffer_size']:,}), over {check['chunks_after_filling']} chunks after the rings "
              f"filled: {100 * (check['measured_share'] or float('nan')):.3g} % measured against "
              f"{100 * check['predicted_share']:.3g} % predicted from the episodes above."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    lengths = episode_lengths(args.pool, args.steps, args.seed)
    if lengths.size == 0:
        raise SystemExit("no episode ended: give more --steps")
    capped = np.full(1, CAP)
    shares = {e: (REPLAY // e, unknown_share(lengths, REPLAY // e), unknown_share(capped, REPLAY // e))
              for e in args.envs}
    check = trainer_check(args, lengths)
    text = markdown(args, lengths, shares, check)
    (args.out / "summary.md").write_text(text, encoding="utf-8")
    (args.out / "summary.json").write_text(json.dumps({
        "episode_lengths": {"count": int(lengths.size), "median": float(np.median(lengths)),
                            "mean": float(lengths.mean()), "max": int(lengths.max())},
        "shares": {str(e): {"ring": r, "random_play": s, "all_at_cap": c} for e, (r, s, c) in shares.items()},
        "trainer_check": check}, indent=1), encoding="utf-8")
    (args.out / "run_info.json").write_text(json.dumps({
        "command": command_line("experiments.studies.unknown_returns", argv), **source_revision(),
        "device": f"{platform.machine()} CPU, {os.cpu_count()} cores (no accelerator)",
        "date": time.strftime("%Y-%m-%d"),
        "wall_seconds": round(time.monotonic() - started, 1)}, indent=1), encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
