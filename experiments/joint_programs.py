"""Several programs (one per structure: DORA, RND, ... each with its own runs) stepped in one scan, for
experiments/program_overlap.py: each program's runs do exactly what they do in a program of their own, and a GPU
runs the small programs' steps in one compiled loop instead of one loop after another.

Reaches inside: the trainer's steps (act_and_record, train_runs, copy_target), to compose several programs' steps
into one scan, which the package does not offer (a mix of methods trains one program after another, or in
processes of their own).
"""

from __future__ import annotations

import functools

import jax

from opiq_jax.agent.trainer import (
    Agent, TrainState, act_and_record, copy_target, due_to_copy, due_to_train, train_runs, with_chunk_metrics,
)


def joint_env_step(agents: tuple[Agent, ...], states: tuple[TrainState, ...], _) -> tuple[tuple[TrainState, ...], None]:
    """One environment step of several programs' runs (:func:`joint_train_chunk`), each in the strict order of
    :func:`env_step`. Their step counters and schedules are equal, so one ``lax.cond`` trains them all and one
    copies their targets."""
    acted = [act_and_record(agent, state) for agent, state in zip(agents, states)]
    stored = states[0].step + 1
    runs = tuple(runs for _, runs in acted)
    with jax.named_scope("update"):
        runs = jax.lax.cond(due_to_train(agents[0], stored),
                            lambda rs: tuple(train_runs(a, r) for a, r in zip(agents, rs)), lambda rs: rs, runs)
    with jax.named_scope("target_copy"):
        runs = jax.lax.cond(due_to_copy(agents[0], stored),
                            lambda rs: tuple(jax.vmap(functools.partial(copy_target, a))(r) for a, r in zip(agents, rs)),
                            lambda rs: rs, runs)
    return tuple(TrainState(step=stored, env=shared, runs=r) for (shared, _), r in zip(acted, runs)), None


def same_schedule(agents: tuple[Agent, ...]) -> str | None:
    """Why ``agents`` cannot share one scan (:func:`joint_train_chunk`), or None if they can."""
    fields = ("log_every", "total_steps", "batch_size", "train_every", "target_update")
    first = agents[0]
    for agent in agents[1:]:
        differ = [f for f in fields if getattr(agent.static, f) != getattr(first.static, f)]
        if differ or agent.envs_per_run != first.envs_per_run:
            return f"their {', '.join(differ) or 'environments per run'} differ"
    if any(agent.path.overlaps for agent in agents):
        return "a pool environment overlaps its updates with its emulators"
    return None


def joint_train_chunk(agents: tuple[Agent, ...], states: tuple[TrainState, ...]) -> tuple[tuple, tuple]:
    """``train_chunk`` of several programs (one per structure: DORA, RND, ... each with its own runs) in one
    scan. Each program's runs do exactly what they do in a program of their own; the GPU then runs the
    small programs' steps in one compiled loop instead of one loop after another."""
    reason = same_schedule(agents)
    if reason is not None:
        raise ValueError(f"these programs cannot train in one scan: {reason}")
    length = agents[0].static.log_every // agents[0].envs_per_run
    states, _ = jax.lax.scan(functools.partial(joint_env_step, tuple(agents)), tuple(states), None, length=length)
    results = [with_chunk_metrics(agent, state) for agent, state in zip(agents, states)]
    return tuple(s for s, _ in results), tuple(m for _, m in results)
