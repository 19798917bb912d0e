"""A different replay or a different counter is one class, named by an environment's spec: a toy of each, defined in
this file alone, registered through the public extension points and trained; no file of the package is edited."""

from __future__ import annotations

import contextlib
import dataclasses
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import opiq_jax
from opiq_jax.contracts.compact import Transition
from opiq_jax.primitives import replay as ring
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


@contextlib.contextmanager
def the_chain_with(name: str, **contracts):
    """The chain registered as ``name`` with the replay or counting ``contracts`` of its spec, for the block."""
    opiq_jax.register_environment(dataclasses.replace(environment_spec("chain"), name=name, **contracts))
    try:
        yield name
    finally:
        ENVIRONMENTS.pop(name)


@pytest.fixture
def chain_with_newest_replay():
    with the_chain_with("chain-newest", replay=NewestReplay) as name:
        yield name


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


def test_a_replay_named_by_the_spec_trains_in_place_of_the_steppings_own(chain_with_newest_replay, tmp_path):
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


class TdErrorTally(opiq_jax.CompactReplay):
    """A toy of a prioritised replay's write-back: the compact ring, sampled as it samples, beside a tally of the TD
    errors that every update hands back (a prioritised replay would write them to the slots it sampled)."""

    writes_priorities = True

    def init(self, env, start):
        return dict(ring=super().init(env, start), td_sum=jnp.float32(0), updates=jnp.int32(0))

    def ring_of(self, run):
        return run.replace(memory=run.memory["ring"])

    def add(self, run, decision, outcome):
        ring, item = super().add(self.ring_of(run), decision, outcome)
        return dict(run.memory, ring=ring), item

    def sample(self, run, key):
        return super().sample(self.ring_of(run), key)

    def recent(self, run, count):
        return super().recent(self.ring_of(run), count)

    def prioritised(self, run, batch, td_errors):
        assert td_errors.shape == batch.actions.shape[:1] and td_errors.dtype == jnp.float32
        return dict(run.memory, td_sum=run.memory["td_sum"] + jnp.sum(td_errors), updates=run.memory["updates"] + 1)


def test_a_replay_that_writes_priorities_gets_every_updates_td_errors_and_trains_as_its_sampler(tmp_path):
    options = dict(seeds=2, steps=1_500, chain_length=8, log_every=500, buffer_size=500, hidden=(16,))
    with the_chain_with("chain-tally", replay=TdErrorTally) as name:
        program = opiq_jax.make_train(env=name, methods=["opiq"], **options)
        state = program.init(program.run_keys, program.env_keys, program.hparams)
        for _ in range(program.chunks):
            state, _ = program.train_chunk(state)
        tally = opiq_jax.train(env=name, methods=["opiq"], out=tmp_path / "tally", **options)
    updates, td_sum = np.asarray(state.runs.memory["updates"]), np.asarray(state.runs.memory["td_sum"])
    losses = [r for r in tally.metrics if r["metric"] == "loss" and np.isfinite(r["value"])]
    assert losses and np.all(updates > 0) and np.all(np.isfinite(td_sum)) and np.all(td_sum > 0)
    # the write-back reads and changes nothing the learner uses: the runs train as the compact ring's do
    plain = opiq_jax.train(env="chain", methods=["opiq"], out=tmp_path / "plain", **options)
    assert [(r["metric"], r["value"]) for r in tally.metrics] == [(r["metric"], r["value"]) for r in plain.metrics]


# ------------------------------------------------------------------------------------ a different counter


class CellTableCounting(opiq_jax.Counting):
    """A toy counter: ``N(s, a)`` exactly, in a dense table over the environment's cells (no hash, no sketch)."""

    counted = "the cell id, exactly, in a table of every cell"

    def __init__(self, stepping):
        self.env = stepping.env

    def init(self, hash_key, env, num_actions):
        return jnp.zeros((num_actions, self.env.num_cells), jnp.int32)

    def columns(self, run, compact):
        return self.env.cell_id(compact)[None]

    def add(self, table, decision, outcome):
        for e in range(decision.actions.shape[0]):
            real = (~outcome.first[e]).astype(jnp.int32)
            table = table.at[decision.actions[e], decision.columns[e][0]].add(real)
        return table

    def query(self, table, columns, action):
        return table[action, columns[0]]

    def query_all(self, table, columns):
        return table[:, columns[0]]


@pytest.fixture
def chain_with_a_table_of_counts():
    with the_chain_with("chain-table", counting=CellTableCounting) as name:
        yield name


def test_a_counter_named_by_the_spec_counts_every_step_and_trains_as_the_exact_sketch(chain_with_a_table_of_counts,
                                                                                       tmp_path):
    options = dict(seeds=2, steps=1_500, chain_length=8, log_every=500, buffer_size=500, hidden=(16,))
    program = opiq_jax.make_train(env=chain_with_a_table_of_counts, methods=["opiq"], **options)
    state = program.init(program.run_keys, program.env_keys, program.hparams)
    for _ in range(program.chunks):
        state, _ = program.train_chunk(state)
    assert state.runs.counts.shape == (2, 2, 8)  # runs, actions, cells: the toy's own table
    assert state.runs.counts.sum(axis=(1, 2)).tolist() == [1_500, 1_500]  # every step counted once
    toy = opiq_jax.train(env=chain_with_a_table_of_counts, methods=["opiq", "dqn_pc"], out=tmp_path / "table",
                         **options)
    # the sketch keyed by the exact cell ids: 8 cells never collide in all 4 rows, so its counts are exact too
    sketch = opiq_jax.train(env="chain", methods=["opiq", "dqn_pc"], count_features="exact", out=tmp_path / "sketch",
                            **options)
    assert toy.config["resolved"]["counted"] == CellTableCounting.counted
    assert [(r["metric"], r["value"]) for r in toy.metrics] == [(r["metric"], r["value"]) for r in sketch.metrics]


# ------------------------------------------------------------------------------------ options follow the contracts


class NewestReplayOfTheUnfinished(NewestReplay):
    """The toy replay, declaring that it reads ``--mmc-unfinished`` (as the frame rings do)."""

    options = ("mmc_unfinished",)
    serves = "the toy replay"


def test_an_option_is_accepted_where_a_contract_reads_it_and_refused_where_none_does():
    options = dict(seeds=1, steps=300, chain_length=8, log_every=100, buffer_size=100, hidden=(8,))
    with the_chain_with("chain-unfinished", replay=NewestReplayOfTheUnfinished) as name:
        program = opiq_jax.make_train(env=name, methods=["opiq"], mmc_unfinished="n_step", **options)
    assert program.static.mmc_unfinished == "n_step"
    refusal = r"^mmc_unfinished applies to environments stepped through a pool of emulators .* only, not to chain:"
    with pytest.raises(opiq_jax.UsageError, match=refusal):
        opiq_jax.make_train(env="chain", methods=["opiq"], mmc_unfinished="n_step", **options)
