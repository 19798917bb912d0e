"""Environment steps per second on the hard-exploration suites: the project's compiled trainer beside the suite's raw
environment stepping, at the same number of parallel environments, on one card in one call.

For each environment (default: ``minigrid:DoorKey-16x16``, ``craftax:Classic``, ``minatar:Breakout``) and each
number of parallel environments R:

* **raw stepping**: R copies of the environment, built as the trainer builds it, stepped with uniform random actions
  (gymnax's step, which resets an episode that ended), ``--steps`` steps in one compiled scan; nothing else;
* **the trainer**: OPIQ at the environment's settings, R runs of one environment each, every run acting, counting,
  storing and training (``opiq_jax.benchmark.throughput.measure_trainer``: a chunk of ``--steps`` steps, the best
  of two once every run learns).

Each rate is the fastest of two timed calls after a compile; ``trainer / raw`` is how much of the raw rate the whole
agent keeps. The replay holds ``--buffer-size`` steps per run (its size changes memory, not a step's work), so that
the wide rows fit: Craftax's default replay is about 1 GB a run.

Reference agents: the suites' own (navix's PPO, Craftax_Baselines' PPO) are not timed here. navix's imports wandb,
distrax and rlax, which the GPU machine lacks and cannot carry; Craftax_Baselines is a repository of scripts, not a
package; xminigrid and craftax ship none.

Writes ``--out``: ``suite_throughput.json`` (the settings and every row, saved after each, so that a call cut short
keeps what it measured), ``README.md`` (the table) and ``run_info.json`` (the card, jax, the command, the revision).

Run: ``python -m experiments.bench.suite_throughput --out DIR``. Any environment the trainer steps in its program
can be named (``--envs chain gymnax:CartPole-v1``).

Reaches inside: the registry (``static_for_env``) and the plain baseline's ``make_env``, to build each environment as
the trainer does, and the trainer's timing helpers (``opiq_jax.benchmark.throughput``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import tyro

from experiments.bench.report import compiles_note, keep_row, unless_out_of_memory, write_report
from experiments.tools.command_line import command_line

SUITE_TASKS = ("minigrid:DoorKey-16x16", "craftax:Classic", "minatar:Breakout")
"""One task of each suite: MiniGrid's hard DoorKey, Craftax-Classic and a MinAtar game."""


@dataclass
class Args:
    out: Path = Path("results/suite-throughput")
    """Folder for suite_throughput.json, README.md and run_info.json."""
    envs: tuple[str, ...] = SUITE_TASKS
    """The environments timed, in this order (any stepped inside the trainer's program)."""
    runs: tuple[int, ...] = (8, 512)
    """Numbers of parallel environments (the trainer: runs of one environment each)."""
    steps: int = 1000
    """Environment steps per environment in one timed call."""
    buffer_size: int = 10_000
    """Replay capacity per run while the trainer is timed."""


def time_raw(env_name: str, num_envs: int, steps: int) -> dict:
    """``num_envs`` copies of ``env_name`` stepped with random actions: the rate, or the error of running out of
    memory."""
    import jax

    from opiq_jax.benchmark.plain import make_env
    from opiq_jax.benchmark.throughput import timed_repeats
    from opiq_jax.registry.environments import static_for_env

    env = make_env(static_for_env(env_name))
    params = env.default_params
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    @jax.jit
    def advance(carry):
        def one(carry, _):
            state, key = carry
            key, act, move = jax.random.split(key, 3)
            actions = jax.random.randint(act, (num_envs,), 0, env.num_actions)
            stepped = step(jax.random.split(move, num_envs), state, actions, params)  # (obs, state, reward, ...)
            return (stepped[1], key), stepped[2].sum()
        carry, rewards = jax.lax.scan(one, carry, None, length=steps)
        return carry, rewards.sum()

    def measure() -> dict:
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), num_envs), params)
        carry = jax.block_until_ready(advance((state, jax.random.key(1)))[0])  # the compile, untimed
        _, seconds, compiles = timed_repeats(lambda c: advance(c)[0], carry, 2)
        return dict(steps_per_s=num_envs * steps / min(seconds), compiles_timed=compiles)

    return unless_out_of_memory(measure, env=env_name, kind="raw", envs=num_envs)


def time_trainer(env_name: str, num_envs: int, args: Args) -> dict:
    """OPIQ's trainer on ``env_name``, ``num_envs`` runs of one environment each: the rate, or the error of running
    out of memory."""
    from opiq_jax.benchmark.throughput import measure_trainer
    from opiq_jax.registry.environments import static_for_env

    static = static_for_env(env_name, total_steps=2 * args.steps, log_every=args.steps, buffer_size=args.buffer_size)

    def measure() -> dict:
        m = measure_trainer(static, num_envs)
        return dict(steps_per_s=m.steps_per_s, compiles_timed=m.compiles_timed, program_bytes=m.program_bytes)

    return unless_out_of_memory(measure, env=env_name, kind="trainer", envs=num_envs)


def rate(rows: list[dict], env: str, kind: str, envs: int) -> float | None:
    """The rate of the row of ``env``, ``kind`` and ``envs``; None where it failed or was not timed."""
    found = [r for r in rows if (r["env"], r["kind"], r["envs"]) == (env, kind, envs) and not r.get("error")]
    return found[0]["steps_per_s"] if found else None


def table(rows: list[dict], device: str) -> str:
    """The README's table: each environment and width, the raw and the trainer's rates and their ratio."""
    def cell(value: float | None) -> str:
        return "failed" if value is None else f"{value:,.0f}"
    lines = [f"Environment steps per second on {device}, each the fastest of two timed calls after its compile.", "",
             "| environment | parallel environments | raw stepping | OPIQ trainer | trainer / raw |",
             "|---|---|---|---|---|"]
    for env, envs in dict.fromkeys((r["env"], r["envs"]) for r in rows):
        raw, trainer = rate(rows, env, "raw", envs), rate(rows, env, "trainer", envs)
        ratio = "n/a" if None in (raw, trainer) else f"{trainer / raw:.3f}"
        lines.append(f"| {env} | {envs} | {cell(raw)} | {cell(trainer)} | {ratio} |")
    lines += compiles_note([f"{r['env']} {r['kind']} at {r['envs']}" for r in rows if r.get("compiles_timed")])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    if not args.envs or min((*args.runs, args.steps, args.buffer_size)) < 1:
        raise SystemExit("suite_throughput: error: give at least one environment, and runs, steps and buffer sizes "
                         ">= 1")
    from opiq_jax.registry.environments import environment_spec, started_by_host

    for env in args.envs:
        try:
            environment_spec(env)
        except Exception as error:  # a name the registry does not know, or a missing extra: its own one line
            raise SystemExit(f"suite_throughput: error: {error}") from None
        if started_by_host(env):
            raise SystemExit(f"suite_throughput: error: {env} is stepped by the host (a pool), not in the program")
    import jax  # after the arguments are checked: a typo costs no backend start

    device, started, rows = jax.devices()[0].device_kind, time.perf_counter(), []
    args.out.mkdir(parents=True, exist_ok=True)
    for env in args.envs:
        for envs in args.runs:
            for row in (time_raw(env, envs, args.steps), time_trainer(env, envs, args)):
                keep_row(args.out / "suite_throughput.json", device, args, rows, row, f"{env}, {row['kind']}, {envs}")
    text = table(rows, device)
    write_report(args.out, "The suites: the trainer beside raw stepping", command_line(
        "experiments.bench.suite_throughput", argv), text, device, started, args)
    print(text)


if __name__ == "__main__":
    main()
