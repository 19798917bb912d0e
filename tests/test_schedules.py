"""The schedules against the run's environment steps, with one environment per run and several (issue 36 point 4,
issue 37 point 2): the updates (one every ``train_every`` environment steps of the run once the replay holds more
than a batch), the target copies (one every ``target_update`` steps of the run) and epsilon (linear in the run's
steps) are counted after every vectorised step, on the chain (compact path, E = 1) and on the fake pool (pool path,
E = 1, 2, 4, with and without ``overlap``).

Two runs share each program, so a schedule that counted the pool's steps (runs x E) instead of the run's would show,
and so would one that counted scan iterations instead of environment steps (E > 1).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from opiq_jax.agent.trainer import make_train
from opiq_jax.common.config import make_hparams, stack_hparams
from opiq_jax.parts import PARTS, register_part
from opiq_jax.registry.environments import static_for_env
from tests.fake_pool import FakePool
from tests.tally import Tally

RUNS = 2
STEPS = 48  # environment steps of each run: three target copies
SCHEDULE = dict(total_steps=STEPS, batch_size=4, target_update=16, buffer_size=64, hidden=(16,),
                parts=("schedule_tally",))
EPSILON = {"epsilon_start": 1.0, "epsilon_end": 0.1, "epsilon_decay_steps": 32.0}


class ScheduleTally(Tally):
    """The tally under a name of this module's, registered for its tests only."""

    name = "schedule_tally"


@pytest.fixture(scope="module", autouse=True)
def tally():
    register_part(ScheduleTally())
    yield
    PARTS.pop(ScheduleTally.name)


# ---------------------------------------------------------------------------------- what the schedules must give


def updates_due(steps: int, static) -> int:
    """Updates due after ``steps`` environment steps of a run: one per ``train_every`` steps, from the first step at
    which the replay holds more than a batch (the trainer asks once per vectorised step; ``batch_size`` being a
    multiple of E, the answer first turns at the same step of the run as for E = 1)."""
    return len([s for s in range(static.train_every, steps + 1, static.train_every) if s > static.batch_size])


def updates_made(steps: int, static, overlaps: bool) -> int:
    """Updates made after ``steps``: with ``overlap`` the update of a vectorised step runs while the emulators step,
    on the replay as the previous step left it, so the updates due at the newest vectorised step (E environment
    steps) are made at the next one, before its outcome arrives. The replay ratio is the same; the lag stays one
    vectorised step however long the run."""
    return updates_due(steps - (static.envs_per_run if overlaps else 0), static)


def epsilon_at(steps: int) -> float:
    fraction = min(1.0, steps / EPSILON["epsilon_decay_steps"])
    return EPSILON["epsilon_start"] + (EPSILON["epsilon_end"] - EPSILON["epsilon_start"]) * fraction


# ---------------------------------------------------------------------------------- programs


def chain_program(**overrides):
    return make_train(static_for_env("chain", chain_length=6, **{**SCHEDULE, **overrides})), None


def pool_program(**overrides):
    static = static_for_env("montezuma", network="mlp", **{**SCHEDULE, **overrides})
    pool = FakePool(RUNS * static.envs_per_run, max_episode_steps=20)
    return make_train(static, pool), pool.reset()


def initial_state(trainer, start):
    """Two runs of the program, epsilon decaying over 32 of their steps."""
    run_keys, env_keys = jax.random.split(jax.random.key(5), 2 * RUNS).reshape(2, RUNS)
    hparams = stack_hparams([make_hparams(trainer.agent.hparam_options, EPSILON)] * RUNS)
    return jax.jit(trainer.init)(run_keys, env_keys, hparams, *(() if start is None else (start,)))


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------------------------- the tests

CASES = {  # name: (path, envs per run, train_every, overlap)
    "chain-E1": ("chain", 1, 2, False),
    "pool-E1": ("pool", 1, 2, False),
    "pool-E1-overlap": ("pool", 1, 2, True),
    "pool-E2": ("pool", 2, 4, False),  # one update every other vectorised step
    "pool-E2-overlap": ("pool", 2, 4, True),
    "pool-E4": ("pool", 4, 2, False),  # two updates per vectorised step
    "pool-E4-overlap": ("pool", 4, 2, True),
}


@pytest.mark.parametrize("case", CASES)
def test_updates_target_copies_and_epsilon_count_the_runs_environment_steps(case):
    """After every vectorised step (a chunk of E steps): the updates made, the target network (equal to the online
    network right after each copy step, unchanged between copies) and the chunk's epsilon, against the run's steps."""
    path, envs, train_every, overlap = CASES[case]
    options = dict(log_every=envs, train_every=train_every)
    if path == "chain":
        trainer, start = chain_program(**options)
    else:
        trainer, start = pool_program(envs_per_run=envs, overlap=overlap, **options)
    static, overlaps = trainer.static, trainer.stepping.overlaps
    assert overlaps == overlap and trainer.agent.envs_per_run == envs
    state, train_chunk = initial_state(trainer, start), jax.jit(trainer.train_chunk)
    targets = [leaves(jax.tree.map(lambda x: x[r], state.runs.target_params)) for r in range(RUNS)]
    copies = 0
    for steps in range(envs, STEPS + 1, envs):
        state, metrics = train_chunk(state)
        runs = jax.device_get(state.runs)
        tally = runs.parts[ScheduleTally.name]
        np.testing.assert_array_equal(tally["steps"], steps)
        np.testing.assert_array_equal(tally["updates"], updates_made(steps, static, overlaps), err_msg=f"step {steps}")
        np.testing.assert_allclose(metrics["epsilon"], epsilon_at(steps), rtol=1e-6, err_msg=f"step {steps}")
        copied = steps % static.target_update == 0
        for r in range(RUNS):
            online = leaves(jax.tree.map(lambda x: x[r], trainer.agent.forward_params(runs)))
            target = leaves(jax.tree.map(lambda x: x[r], runs.target_params))
            if copied:  # each copy period holds updates, so a missing or misplaced copy would show
                assert same(target, online) and not same(target, targets[r]), (steps, r)
                targets[r] = target
            else:
                assert same(target, targets[r]), (steps, r)
        copies += copied
    assert copies == STEPS // static.target_update == 3


@pytest.mark.parametrize("envs,overlap,made", [(1, False, (10, 22)), (1, True, (9, 21)), (4, False, (10, 22)),
                                               (4, True, (8, 20))])
def test_overlap_makes_the_updates_of_a_vectorised_step_at_the_next_one(envs, overlap, made):
    """24-step chunks, one update every 2 steps from step 6 (batch 4): 10 updates are due after the first chunk and
    12 more in the second. Under ``overlap`` the updates due at the chunk's last vectorised step are made at the next
    one, before its outcome arrives: 1 update short at E = 1 (the step-24 one), 2 at E = 4 (steps 22 and 24), and
    the same shortfall after the second chunk, whose 12 updates keep the replay ratio exactly."""
    trainer, start = pool_program(envs_per_run=envs, overlap=overlap, log_every=24, train_every=2)
    state, train_chunk = initial_state(trainer, start), jax.jit(trainer.train_chunk)
    counted = []
    for _ in range(2):
        state, _ = train_chunk(state)
        counted.append(jax.device_get(state.runs.parts[ScheduleTally.name]["updates"]))
    np.testing.assert_array_equal(counted, np.repeat(np.array(made)[:, None], RUNS, axis=1))
    assert made == tuple(updates_made(s, trainer.static, overlap) for s in (24, 48))
