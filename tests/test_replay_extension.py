"""A different replay is one class, named by an environment's spec: a toy defined in this file alone, registered
through the public extension points and trained; no file of the package is edited."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import opiq_jax
from opiq_jax.paths.compact import Transition
from opiq_jax.pieces import replay as ring
from opiq_jax.registry.environments import ENVIRONMENTS, environment_spec

NEWEST = 32


class NewestReplay(opiq_jax.CompactReplay):
    """A toy replay: the compact ring, but every minibatch is drawn from the newest ``NEWEST`` stored steps only (a
    queue of recent experience rather than a uniform replay)."""

    def sample(self, run, key):
        ring, batch, n = run.memory, self.static.batch_size, self.static.n_step
        newest = jnp.minimum(ring.size, NEWEST)
        ages = ring.size - newest + jax.random.randint(key, (batch,), 0, jnp.maximum(newest, 1))
        ages = ages[:, None] + jnp.arange(n)[None, :]
        oldest = (ring.position - ring.size) % ring.capacity
        windows = jax.tree.map(lambda leaf: leaf[(oldest + ages) % ring.capacity], ring.items)
        return self.batch_of(run, windows, ages < ring.size)


@pytest.fixture
def chain_with_newest_replay():
    opiq_jax.register_environment(dataclasses.replace(environment_spec("chain"), name="chain-newest",
                                                      replay=NewestReplay))
    yield "chain-newest"
    ENVIRONMENTS.pop("chain-newest")


def stored_steps(count: int, capacity: int):
    """The toy and a run whose compact ring has stored ``count`` steps, each step's action its index."""
    replay = NewestReplay(SimpleNamespace(env=None, static=SimpleNamespace(batch_size=256, n_step=1)))

    def step(index: int) -> Transition:
        return Transition(compact=jnp.array([index]), action=jnp.int32(index), reward=jnp.float32(0),
                          terminated=jnp.bool_(False), done=jnp.bool_(False), next_compact=jnp.array([index + 1]))

    buffer = ring.init(step(0), capacity)
    for index in range(count):
        buffer = ring.add(buffer, step(index))
    return replay, SimpleNamespace(memory=buffer)


def test_the_toy_replay_draws_only_the_newest_steps_of_a_ring_that_has_wrapped():
    replay, run = stored_steps(count=150, capacity=100)  # wrapped: slots hold steps 50 to 149
    batch = replay.sample(run, jax.random.key(0))
    drawn = np.asarray(batch.actions[:, 0])
    assert drawn.min() >= 150 - NEWEST and drawn.max() == 149 and len(set(drawn.tolist())) > NEWEST // 2


def test_a_replay_named_by_the_spec_trains_in_place_of_the_paths_own(chain_with_newest_replay, tmp_path):
    options = dict(seeds=2, steps=1_500, chain_length=8, log_every=500, buffer_size=500, hidden=(16,))
    program = opiq_jax.make_train(env=chain_with_newest_replay, methods=["opiq"], **options)
    state = program.init(program.run_keys, program.env_keys, program.hparams)
    assert state.runs.memory.items.action.shape == (2, 500)  # the compact ring it inherits, one per run
    toy = opiq_jax.train(env=chain_with_newest_replay, methods=["opiq"], out=tmp_path / "newest", **options)
    uniform = opiq_jax.train(env="chain", methods=["opiq"], out=tmp_path / "uniform", **options)
    assert toy.finished and uniform.finished

    def losses(results):
        return [row["value"] for row in results.metrics if row["metric"] == "loss"]

    # the same seeds, networks and environments: only where the minibatches come from differs
    assert np.all(np.isfinite(losses(toy))) and losses(toy) != losses(uniform)
