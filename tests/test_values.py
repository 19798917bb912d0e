"""Values the algorithm must produce, checked against numbers worked out by hand (or by a plain Python
recount), so that a plausible slip in the code (a max for a min, one constant for another, a clip left
out, a stale metrics row kept) fails a test. Each test names the fact it pins down; the mutation harness
(``experiments/tools/mutation_testing.py``) lists which slips each one catches."""

from __future__ import annotations

import csv
import io
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent.trainer import make_train, sample_batch
from opiq_jax.common.config import stack_hparams
from opiq_jax.contracts.pool import to_network_input
from opiq_jax.primitives import counts, frame_replay
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.registry.methods import program_parts
from opiq_jax.store.files import (
    CorruptCheckpoint,
    read_checkpoint,
    read_checkpoint_arrays,
    write_checkpoint,
)
from tests.fake_pool import FakePool
from tests.training import targets_of

GAMMA = 0.99


def init_one(trainer, hp: dict, seed: int = 0, start=None):
    """The initial state of one run of ``trainer`` with hyperparameters ``hp`` (run and environment keys from ``seed``;
    ``start``: what a pool's reset returned)."""
    run_keys, env_keys = jax.random.split(jax.random.key(seed), 2)[:, None]
    hparams = stack_hparams([{k: jnp.float32(v) for k, v in hp.items()}])
    # compiled whole, as the runner does (op by op, each of its many operations would compile on its own)
    return jax.jit(trainer.init)(run_keys, env_keys, hparams, *(() if start is None else (start,)))


def first_run(tree):
    return jax.tree.map(lambda x: x[0], tree)


# ---------------------------------------------------------------------------------- count-min sketch


def colliding_sketch() -> tuple[jax.Array, jax.Array]:
    """A 2-action, 3-row sketch and one state's columns ``[1, 4, 6]`` in which row 1 also holds a colliding code's
    visits: the true counts are N(s, 0) = 1 and N(s, 1) = 2, which rows 0 and 2 hold; row 1 reads 6 and 7."""
    sketch = jnp.zeros((2, 3, 8), jnp.int32)
    sketch = sketch.at[0, 0, 1].set(1).at[0, 1, 4].set(6).at[0, 2, 6].set(1)
    sketch = sketch.at[1, 0, 1].set(2).at[1, 1, 4].set(7).at[1, 2, 6].set(3)  # row 2: another collision, smaller
    sketch = sketch.at[1, 1, 5].set(50)  # a column the state does not use
    return sketch, jnp.array([1, 4, 6], jnp.int32)


def test_count_min_query_reads_the_smallest_row_where_one_row_collides():
    sketch, columns = colliding_sketch()
    assert int(counts.query(sketch, columns, 0)) == 1
    assert int(counts.query(sketch, columns, 1)) == 2
    np.testing.assert_array_equal(counts.query_all_actions(sketch, columns), [1, 2])
    # updating adds one in every row of the action's columns, so the minimum moves by exactly one
    updated = counts.update(sketch, columns, 1)
    np.testing.assert_array_equal(counts.query_all_actions(updated, columns), [1, 3])
    np.testing.assert_array_equal(np.asarray(updated - sketch)[1, [0, 1, 2], [1, 4, 6]], [1, 1, 1])
    assert int(jnp.sum(updated - sketch)) == 3


# ---------------------------------------------------------------------------------- BSP


def test_bsp_scales_the_shared_torsos_gradients_by_one_over_the_number_of_heads():
    from types import SimpleNamespace

    from opiq_jax.parts.bsp import PART as BSP

    grads = {"params": {"torso": {"w": jnp.full(3, 2.0)}, "heads": {"w": jnp.full(2, 2.0)}}}
    scaled = BSP.scale_gradients(SimpleNamespace(num_heads=4), grads)
    np.testing.assert_allclose(scaled["params"]["torso"]["w"], 0.5)  # 2 / 4 heads
    np.testing.assert_array_equal(scaled["params"]["heads"]["w"], 2.0)  # each head keeps its own gradient


# ---------------------------------------------------------------------------------- acting on Q+

# c_action and c_bootstrap far apart, so that using one for the other changes every number below
ACT = {"m": 2.0, "c_action": 2.0, "c_bootstrap": 0.05, "beta": 0.1, "epsilon_start": 0.0, "epsilon_end": 0.0}


@pytest.fixture(scope="module")
def chain_trainer():
    """OPIQ on a 6-state chain, exact counts, and a batch larger than the chunk: acting never trains, so the
    Q-network stays at its initial parameters and every action can be recomputed by hand."""
    static = static_for_env("chain", chain_length=6, total_steps=40, log_every=40, buffer_size=128, batch_size=64,
                            hidden=(8,), count_features="exact", parts=program_parts(["opiq"]))
    return make_train(static)


def test_greedy_action_is_argmax_of_q_plus_c_action_bonus_on_a_hand_made_count_table(chain_trainer):
    trainer = chain_trainer
    hp = method_hparams("chain", "opiq", **ACT)
    run = first_run(init_one(trainer, hp).runs)
    obs = trainer.stepping.observations(run.env)  # the start state, cell 1
    q_values = jax.jit(trainer.network.apply)  # each call compiled whole, not op by op
    q = np.asarray(q_values(trainer.agent.forward_params(run), obs))[0]
    # the action Q prefers has been tried 3 times, the other never
    preferred = int(np.argmax(q))
    sketch = run.counts.sketch
    cols = jax.jit(trainer.agent.count_columns)(run, jnp.array([1], jnp.int32))
    for _ in range(3):
        sketch = jax.jit(counts.update)(sketch, cols, preferred)
    run = run.replace(counts=run.counts.replace(sketch=sketch))
    visits = np.zeros(2)
    visits[preferred] = 3
    expected = q + 2.0 / (visits + 1.0) ** 2  # C_action / (N + 1)^M: 2 for the untried action, 2/16 for the other
    values = np.asarray(jax.jit(trainer.action_values)(run, obs))[0]
    np.testing.assert_allclose(values, expected, rtol=1e-6)
    assert int(np.argmax(values)) == int(np.argmax(expected))


def test_trainer_acts_greedily_on_q_plus_with_c_action_not_c_bootstrap(chain_trainer):
    """Every action of a chunk (epsilon 0, no learning yet) is argmax_a Q(s, a) + C_action / (N(s, a) + 1)^M with
    the counts of the steps before it, recounted here from the replay; ``qplus_start`` is the same at the start."""
    trainer = chain_trainer
    hp = method_hparams("chain", "opiq", **ACT)
    state = init_one(trainer, hp, seed=4)
    params = trainer.agent.weights.master(first_run(state.runs))
    state, metrics = jax.jit(trainer.train_chunk)(state)
    run = first_run(jax.device_get(state.runs))
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(params), trainer.agent.weights.master(run))  # acting
    steps = int(run.memory.size)
    assert steps == 40
    cells = np.asarray(run.memory.items.compact)[:steps, 0]
    actions = np.asarray(run.memory.items.action)[:steps]
    thermometers = (np.arange(6)[None, :] <= np.arange(6)[:, None]).astype(np.float32)
    online = trainer.agent.forward_params(run)
    q_table = np.asarray(trainer.network.apply(online, jnp.asarray(thermometers)))  # [cell, action]
    seen: Counter = Counter()
    for cell, action in zip(cells, actions):
        n = np.array([seen[(cell, a)] for a in range(2)], np.float32)
        assert action == int(np.argmax(q_table[cell] + 2.0 / (n + 1.0) ** 2)), (cell, n)
        seen[(cell, int(action))] += 1
    assert len(set(actions[cells == 1])) == 2  # the bonus made it try both actions in the start state
    n0 = np.array([seen[(1, a)] for a in range(2)], np.float32)
    assert float(metrics["qplus_start"][0]) == pytest.approx(float(np.max(q_table[1] + 2.0 / (n0 + 1.0) ** 2)),
                                                             rel=1e-6)
    assert float(metrics["q_start"][0]) == pytest.approx(float(np.max(q_table[1])), rel=1e-6)


# ---------------------------------------------------------------------------------- Montezuma's path

POOL_STEPS = 60  # three 20-step episodes of the fake pool, each paying 5 twice (t = 7, 14), with reset steps between
POOL_HP = {"m": 2.0, "c_action": 0.1, "c_bootstrap": 0.01, "beta": 0.01, "beta_mmc": 0.3}


@pytest.fixture(scope="module")
def pool_chunk():
    """One chunk of OPIQ on the pool path stepped by the fake pool (no EnvPool); the batch is larger than the chunk,
    so nothing trains and the replay, the counts and the metrics are those of the steps alone."""
    static = static_for_env("montezuma", total_steps=POOL_STEPS, log_every=POOL_STEPS, buffer_size=128, batch_size=64,
                            train_every=4, target_update=32, sketch_width=512, network="mlp", hidden=(16,),
                            parts=program_parts(["opiq"]))
    pool = FakePool(1, max_episode_steps=20, reward=5.0)
    trainer = make_train(static, pool)
    state = init_one(trainer, method_hparams("montezuma", "opiq", **POOL_HP), seed=2, start=pool.reset())
    state, metrics = jax.jit(trainer.train_chunk)(state)
    return trainer, first_run(state.runs), jax.device_get(metrics)


def ring_arrays(run) -> dict[str, np.ndarray]:
    """The run's frame ring (one environment) as numpy arrays of the stored slots, oldest first (it never wrapped)."""
    ring = jax.tree.map(lambda x: np.asarray(x[0]), run.memory)
    size = int(ring.size)
    assert int(ring.position) == size, "the ring must not have wrapped"
    return {name: getattr(ring, name)[:size] for name in
            ("frames", "action", "reward", "terminated", "truncated", "first", "mc_return")}


def test_montezuma_stores_clipped_rewards_and_reports_unclipped_returns(pool_chunk):
    _, run, metrics = pool_chunk
    ring = ring_arrays(run)
    assert len(ring["reward"]) == POOL_STEPS + 1  # the first observation, then every step
    paid = ~ring["first"] & (ring["reward"] != 0)
    assert paid.sum() >= 4  # two paying steps in each of the two finished episodes at least
    np.testing.assert_array_equal(ring["reward"][paid], 1.0)  # the fake pool paid 5: stored clipped to [-1, 1]
    assert set(np.unique(ring["reward"])) <= {0.0, 1.0}
    # the returns reported are the game's: 5 + 5 per 20-step episode, two episodes ended in the chunk
    assert float(metrics["episodes"][0]) == 2.0
    assert float(metrics["train_return"][0]) == 10.0
    assert float(metrics["max_return"][0]) == 10.0


def test_montezuma_counts_every_real_step_and_no_reset_step(pool_chunk):
    trainer, run, _ = pool_chunk
    ring = ring_arrays(run)
    codes = frame_codes(ring["frames"])
    seen = Counter((codes[k - 1], int(ring["action"][k])) for k in range(1, len(codes)) if not ring["first"][k])
    assert sum(seen.values()) == POOL_STEPS - 2  # two reset steps are not transitions
    for code in set(codes):
        columns = trainer.agent.count_columns(run, jnp.asarray(ring["frames"][codes.index(code)]))
        got = np.asarray(counts.query_all_actions(run.counts.sketch, columns))
        np.testing.assert_array_equal(got, [seen[(code, a)] for a in range(18)])


def frame_codes(frames: np.ndarray) -> list[tuple[int, ...]]:
    """The count feature's code of each frame, as hashable tuples."""
    return [tuple(row) for row in np.asarray(jax.jit(jax.vmap(counts.montezuma_code))(jnp.asarray(frames))).tolist()]


def monte_carlo_returns(ring: dict[str, np.ndarray], gamma: float) -> np.ndarray:
    """G of the transition into each slot: its discounted clipped return to the end of its episode, 0 while the
    episode runs (worked out slot by slot, forwards)."""
    size = len(ring["reward"])
    ended = ring["terminated"] | ring["truncated"]
    returns = np.zeros(size)
    for k in range(size):
        if ring["first"][k]:
            continue
        total, j = 0.0, k
        while j < size and not (j > k and ring["first"][j]):
            total += gamma ** (j - k) * ring["reward"][j]
            if ended[j]:
                returns[k] = total
                break
            j += 1
    return returns


def stack_of(ring: dict[str, np.ndarray], slot: int) -> np.ndarray:
    """uint8[4, 84, 84]: the frames of ``slot`` and the three before it, oldest first, never before its episode's
    first frame (which EnvPool repeats after a reset)."""
    start = max(k for k in range(slot + 1) if ring["first"][k])
    return np.stack([ring["frames"][max(start, slot - back)] for back in (3, 2, 1, 0)])


def test_frame_replay_windows_stop_at_a_restart_that_no_episode_end_precedes():
    """After a resume the pool path starts fresh episodes: a ``first`` slot follows a step that ended nothing. No
    window may run into it, and no transition leads to it."""
    ring = frame_replay.init(16, (2, 2))
    add = jax.jit(frame_replay.add)  # compiled whole, not op by op
    for value, first in [(10, True), (11, False), (12, False), (20, True), (21, False), (22, False), (23, False)]:
        ring = add(ring, jnp.full((2, 2), value, jnp.uint8), jnp.int32(1), jnp.float32(value), False, False, first)
    batch = jax.device_get(jax.jit(frame_replay.sample, static_argnums=(2, 3))(ring, jax.random.key(0), 256, 3))
    expected = {0: [True, True, False], 1: [True, False, False], 3: [True, True, True], 4: [True, True, False],
                5: [True, False, False]}  # start slot -> included steps; slot 2 leads to the restart, 6 to nothing
    assert set(batch.slots.tolist()) == set(expected) and batch.valid.all()
    for slot, included, rewards, next_obs in zip(batch.slots, batch.included, batch.rewards, batch.next_obs):
        np.testing.assert_array_equal(included, expected[int(slot)])
        np.testing.assert_array_equal(rewards[included], [10 + int(slot) + 1 + i if slot < 3
                                                          else 20 + int(slot) - 3 + 1 + i
                                                          for i in range(int(included.sum()))])
        assert int(next_obs[-1, 0, 0]) == (12 if slot < 3 else 20 + int(slot) - 3 + int(included.sum()))


def test_montezuma_n_step_q_plus_target_with_mixed_monte_carlo_by_hand(pool_chunk):
    """y = (1 - beta_mmc) [sum_i gamma^i (r_i + beta / sqrt(N_i)) + gamma^L max_a (Q(s_L, a) + C_bootstrap / (N(s_L, a)
    + 1)^M)] + beta_mmc G, every row of a sampled batch recomputed from the stored steps and recounted visits."""
    trainer, run, _ = pool_chunk
    static, ring = trainer.static, ring_arrays(run)
    n, size = static.n_step, len(ring["reward"])
    key = jax.random.key(11)

    @jax.jit
    def sampled(run, key):
        """The trainer's targets of the batch it samples with ``key``, its row weights, and the rows' start slots
        (the pool path draws them from its one ring with the key's first split)."""
        batch = sample_batch(trainer.agent, run, key)
        memory = jax.tree.map(lambda x: x[0], run.memory)
        starts = frame_replay.sample(memory, jax.random.split(key, 1)[0], static.batch_size, n).slots
        return targets_of(trainer, run, batch)[0][:, 0], batch.weights, starts

    targets, weights, starts = map(np.asarray, sampled(run, key))
    codes = frame_codes(ring["frames"])
    seen = Counter((codes[k - 1], int(ring["action"][k])) for k in range(1, size) if not ring["first"][k])

    def visits(slot, a):
        return seen[(codes[slot], a)]

    ended = ring["terminated"] | ring["truncated"]
    mc = monte_carlo_returns(ring, GAMMA)
    q_target = np.asarray(jax.jit(trainer.network.apply)(  # Q_target at every stored slot's stack
        run.target_params, to_network_input(jnp.asarray(np.stack([stack_of(ring, k) for k in range(size)])))))
    hp = POOL_HP
    checked, terminal_free = 0, 0
    for row, s in enumerate(starts):
        if weights[row] == 0:
            continue
        partial, steps = 0.0, 0
        for i in range(n):
            k = s + 1 + i
            if k >= size or ring["first"][k] or (i > 0 and ended[k - 1]):
                break
            partial += GAMMA**i * (ring["reward"][k] + hp["beta"] / np.sqrt(visits(k - 1, int(ring["action"][k]))))
            steps += 1
        last = s + steps
        q_next = q_target[last]
        bonus = hp["c_bootstrap"] / (np.array([visits(last, a) for a in range(18)], np.float64) + 1.0) ** hp["m"]
        boot = 0.0 if ring["terminated"][last] else GAMMA**steps * np.max(q_next + bonus)
        expected = (1 - hp["beta_mmc"]) * (partial + boot) + hp["beta_mmc"] * mc[s + 1]
        assert targets[row] == pytest.approx(expected, rel=1e-5, abs=1e-5), (row, s, steps)
        checked += 1
        terminal_free += mc[s + 1] != 0
    assert checked >= 60 and terminal_free >= 20  # most rows valid; many with a finished episode's Monte Carlo return


# ---------------------------------------------------------------------------------- checkpoints and resume


def test_checkpoints_read_back_the_newest_values_and_fall_back_past_a_damaged_one(tmp_path):
    older = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([7, 8], np.int32)}
    newer = {"a": older["a"] * 10, "b": older["b"] + 1}
    write_checkpoint(tmp_path, older, 1)
    write_checkpoint(tmp_path, newer, 2)
    restored, chunk = read_checkpoint(tmp_path, older, warn=lambda _: None)
    assert chunk == 2
    np.testing.assert_array_equal(restored["a"], [[0, 10, 20], [30, 40, 50]])
    np.testing.assert_array_equal(restored["b"], [8, 9])
    # one flipped byte inside the newest checkpoint's arrays: named, moved aside, the one before it used
    path = tmp_path / "checkpoint.msgpack"
    data = bytearray(path.read_bytes())
    data[-40] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpoint):
        read_checkpoint_arrays(path)
    warnings = []
    restored, chunk = read_checkpoint(tmp_path, older, warn=warnings.append)
    assert chunk == 1 and len(warnings) == 1 and "checkpoint.msgpack" in warnings[0]
    np.testing.assert_array_equal(restored["a"], older["a"])
    np.testing.assert_array_equal(restored["b"], [7, 8])


RESUME_CHUNKS, RESUME_STOP = 4, 2


@pytest.fixture(scope="module")
def resume_experiment():
    from opiq_jax.runs.experiment import Experiment, RunSpec

    static = static_for_env("chain", chain_length=6, total_steps=400, log_every=100, buffer_size=300, batch_size=16,
                            hidden=(8,), count_features="exact")
    runs = tuple(RunSpec(m, "paper", s, method_hparams("chain", m)) for m in ("opiq", "dqn_pc") for s in range(2))
    return Experiment(static, runs, seed=7)


def state_leaves(state) -> list[np.ndarray]:
    """Every array of a training state, PRNG keys as their data."""
    def plain(x):
        return jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    return [np.asarray(plain(x)) for x in jax.tree.leaves(state)]


def test_resume_drops_the_rows_of_a_chunk_written_after_the_checkpoint_and_matches_an_uninterrupted_run(
        tmp_path, resume_experiment):
    from opiq_jax.host.host_loop import run_experiment
    from opiq_jax.runs.results_folder import read_metrics

    experiment, log_every = resume_experiment, resume_experiment.static.log_every
    interrupted, straight = tmp_path / "interrupted", tmp_path / "straight"
    run_experiment(experiment, interrupted, progress=False, checkpoint_seconds=0, stop_after_chunks=RESUME_STOP)
    metrics = interrupted / "metrics.csv"
    rows = list(csv.reader(io.StringIO(metrics.read_bytes().decode(), newline="")))
    last = [r for r in rows[1:] if int(r[4]) == RESUME_STOP * log_every]
    assert last, "the interrupted run wrote the checkpointed chunk's rows"
    # a chunk whose rows were appended but whose checkpoint was never written: stale rows the resume must drop
    stale = [r[:4] + [str(RESUME_STOP * log_every + log_every), r[5], "12345.5"] for r in last]
    with open(metrics, "a", newline="") as f:
        csv.writer(f).writerows(stale)

    resumed = run_experiment(experiment, interrupted, progress=False, checkpoint_seconds=0)
    uninterrupted = run_experiment(experiment, straight, progress=False, checkpoint_seconds=0)
    assert metrics.read_bytes() == (straight / "metrics.csv").read_bytes()
    assert all(r["value"] != 12345.5 for r in read_metrics(interrupted))
    # dropped by the resume itself, as rows a kill leaves behind: not put right later as a file changed behind the
    # run's back (which would also have set the file aside)
    assert not list(interrupted.glob("metrics.csv.*")), sorted(p.name for p in interrupted.iterdir())
    steps = sorted({r["step"] for r in read_metrics(interrupted)})
    assert steps == [log_every * (c + 1) for c in range(RESUME_CHUNKS)]
    for a, b in zip(state_leaves(resumed), state_leaves(uninterrupted), strict=True):
        np.testing.assert_array_equal(a, b)
