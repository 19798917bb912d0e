"""Montezuma's Revenge: OPIQ and its count-based baselines over one EnvPool pool, compiled end to end.

The same pieces as the chain and maze trainer (counts, optimism, targets, networks, optimiser,
:class:`~opiq_jax.config.HParams`), arranged around what Atari needs:

* one EnvPool pool holds ``envs_per_run`` environments per run (one by default, as the paper's
  agent), reshaped between the pool's ``[runs * envs]`` and ``[runs, envs]``; it is stepped through EnvPool's XLA interface
  *inside* the compiled ``lax.scan`` (a pool cannot be vmapped, so acting and recording are
  vmapped over runs and the pool step sits between them, its handle threaded through the carry);
* the replay stores single uint8 frames (:mod:`opiq_jax.frame_replay`), one ring per environment
  (``buffer_size`` frames per run in all, split evenly; a minibatch draws an equal share from each
  ring), with 4-frame stacks rebuilt
  at sampling, never across an episode; EnvPool's reset step is stored as a ``first`` slot, so it
  is never a transition, never in an n-step window and never counted;
* counts are over the 8x11, 8-level feature of the newest frame (``counts.montezuma_code``);
* training rewards are clipped to [-1, 1]; episode returns are reported unclipped; the room is
  RAM byte 3 and ``rooms_visited`` counts the distinct rooms seen;
* the mixed Monte Carlo target: when an episode ends, each of its stored transitions gets its
  discounted clipped extrinsic return (``frame_replay.fill_episode_returns``, under a ``lax.cond``
  taken only on steps where some run's episode ended), and the target is
  ``(1 - beta_mmc) y + beta_mmc G`` with ``G = 0`` while the episode is unfinished.

Why a module of its own rather than a branch of ``trainer.make_train``: the chain and the maze
store compact states from which any observation is rebuilt, run a greedy test episode per chunk
and can be checkpointed whole; here the replay is a frame ring, there is no test episode (the
paper reports training episodes for Montezuma) and the emulators' state lives outside JAX, so a
run cannot be resumed bit for bit. Sharing the pure pieces keeps one place for each idea.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from tqdm.auto import tqdm

from envs.montezuma import MontezumaPool, StepOutput, clip_reward, newest_frame

from . import counts, frame_replay
from .config import HParams, StaticConfig, make_hparams, stack_hparams
from .networks import init_params, make_network
from .optimism import intrinsic_reward, linear_epsilon, optimism_bonus
from .runner import (
    CONFIG_FILE, METRICS_FILE, append_metrics, atomic_write_bytes, require_fits, run_keys_for, tree_bytes,
)
from .targets import bootstrap_value, mixed_monte_carlo, n_step_return
from .trainer import ChunkStats, make_optimiser

NUM_ROOMS = 256  # RAM byte 3 takes byte values; Montezuma has 24 rooms per level
ATARI_METRICS = (
    "train_return",  # mean unclipped return of the episodes that ended in the chunk (NaN if none)
    "episodes",  # episodes that ended in the chunk
    "max_return",  # largest episode return so far
    "rooms_visited",  # distinct rooms (RAM byte 3) seen so far
    "loss",  # mean TD loss of the chunk's updates
    "epsilon",  # epsilon at the end of the chunk
    "intrinsic_reward",  # mean intrinsic reward of the chunk's sampled transitions
)


@struct.dataclass
class AtariRun:
    key: jax.Array
    hparams: HParams
    params: Any
    target_params: Any
    opt_state: Any
    sketch: jax.Array  # int32[A, rows, width]
    buffer: frame_replay.FrameReplay  # one ring per environment of the run: leading envs axis
    obs: jax.Array  # uint8[envs, 4, 84, 84]: the current stacks (EnvPool's layout, oldest frame first)
    episode_return: jax.Array  # float32[envs]: unclipped return of each running episode
    chunk: ChunkStats  # summed over the run's environments
    max_return: jax.Array
    rooms: jax.Array  # bool[NUM_ROOMS]


@struct.dataclass
class AtariState:
    step: jax.Array  # int32: scan iterations (each steps every environment of every run once)
    handle: jax.Array  # EnvPool's XLA handle
    runs: AtariRun  # leading runs axis


@dataclasses.dataclass(frozen=True)
class AtariTrainer:
    static: StaticConfig
    network: Any
    init: Callable[[jax.Array, HParams, jax.Array, StepOutput], AtariState]
    train_chunk: Callable[[AtariState], tuple[AtariState, dict[str, jax.Array]]]


def to_network_input(stack: jax.Array) -> jax.Array:
    """EnvPool's ``[..., 4, 84, 84]`` stacks as the Nature network's ``[..., 84, 84, 4]``."""
    return jnp.moveaxis(stack, -3, -1)


def make_atari_train(static: StaticConfig, pool, overlap: bool = True) -> AtariTrainer:
    """``init`` and ``train_chunk`` for runs that each own one environment of ``pool`` (a MontezumaPool).

    ``overlap``: learn while the emulators step. The pool step is split into ``send`` and ``recv``
    and the update runs between them, so the accelerator works while EnvPool's threads emulate.
    The price is a one-step lag: an update sees the replay and the counts as they were before the
    current step's transition (which the next update sees). ``overlap=False`` keeps the strict
    order of the chain and maze trainer (step, count, store, then train).
    """
    static.validate()
    if static.bonus_network != "none" or static.bsp_heads:
        raise ValueError("Montezuma runs the count-based methods (dqn, dqn_pc, opiq and its ablations); "
                         "DORA, RND and BSP are implemented for the chain and the maze only")
    num_actions = pool.num_actions
    envs = static.envs_per_run
    network = make_network("nature", num_actions)
    optimiser = make_optimiser(static)
    window = min(pool.max_episode_steps + 1, static.buffer_size)
    # step counts are environment steps per run; one iteration of the scan steps every environment once
    iterations_per_update = max(1, static.train_every // envs)
    updates_per_iteration = max(1, envs // static.train_every)

    def columns_of_frame(frame: jax.Array) -> jax.Array:
        return counts.sketch_columns(counts.montezuma_code(frame), static.sketch_rows, static.sketch_width)

    def q_values(params, stacks: jax.Array) -> jax.Array:
        return network.apply(params, to_network_input(stacks))

    # ---------------------------------------------------------------------------------- init

    def first_frame_ring(obs: jax.Array) -> frame_replay.FrameReplay:
        """One environment's ring holding its first observation as an episode's first slot."""
        buffer = frame_replay.init(static.buffer_size // envs, obs.shape[1:])
        return frame_replay.add(buffer, newest_frame(obs), jnp.int32(0), jnp.float32(0), jnp.bool_(False),
                                jnp.bool_(False), jnp.bool_(True))

    def init_run(key: jax.Array, hp: HParams, obs: jax.Array, room: jax.Array) -> AtariRun:
        """``obs``: ``[envs, 4, 84, 84]`` first stacks of the run's environments; ``room``: ``[envs]``."""
        k_net, k_loop = jax.random.split(key)
        params = init_params(network, k_net, to_network_input(obs[0]), hp.final_bias)
        return AtariRun(
            key=k_loop, hparams=hp, params=params, target_params=params, opt_state=optimiser.init(params),
            sketch=counts.init_sketch(num_actions, static.sketch_rows, static.sketch_width),
            buffer=jax.vmap(first_frame_ring)(obs), obs=obs, episode_return=jnp.zeros((envs,), jnp.float32),
            chunk=ChunkStats.zeros(), max_return=jnp.float32(-jnp.inf),
            rooms=jnp.zeros((NUM_ROOMS,), bool).at[room].set(True),
        )

    def by_run(tree):
        """The pool's ``[runs * envs, ...]`` results as ``[runs, envs, ...]`` (run-major, as the pool's env ids)."""
        return jax.tree.map(lambda x: x.reshape((-1, envs) + x.shape[1:]), tree)

    def init(run_keys: jax.Array, hparams: HParams, handle: jax.Array, first: StepOutput) -> AtariState:
        num_runs = run_keys.shape[0]
        chex.assert_tree_shape_prefix(hparams, (num_runs,))
        chex.assert_shape(first.obs, (num_runs * envs, *pool.obs_shape))
        first = by_run(first)
        runs = jax.vmap(init_run)(run_keys, hparams, first.obs, first.room)
        return AtariState(step=jnp.int32(0), handle=handle, runs=runs)

    # ---------------------------------------------------------------------------------- acting

    def choose_actions(run: AtariRun, step: jax.Array) -> tuple[AtariRun, jax.Array, jax.Array]:
        """Epsilon-greedy actions on Q+ for each of the run's environments, and their states' sketch columns."""
        hp = run.hparams
        key, k_explore, k_random = jax.random.split(run.key, 3)
        columns = jax.vmap(columns_of_frame)(newest_frame(run.obs))  # [envs, rows]
        q = q_values(run.params, run.obs)  # [envs, A]
        n_sa = jax.vmap(counts.query_all_actions, in_axes=(None, 0))(run.sketch, columns)
        greedy = jnp.argmax(q + optimism_bonus(n_sa, hp.c_action, hp.m), axis=-1)
        epsilon = linear_epsilon(step * envs, hp.epsilon_start, hp.epsilon_end, hp.epsilon_decay_steps)
        explore = jax.random.uniform(k_explore, (envs,)) < epsilon
        actions = jnp.where(explore, jax.random.randint(k_random, (envs,), 0, num_actions), greedy)
        return run.replace(key=key), actions.astype(jnp.int32), columns

    def record(run: AtariRun, actions: jax.Array, columns: jax.Array, out: StepOutput) -> AtariRun:
        """Counts each ``(s_t, a_t)``, stores the received frames and updates the episode statistics."""
        real = ~out.first  # EnvPool's reset step: the action was ignored, nothing to count
        done = out.terminated | out.truncated
        buffer = jax.vmap(frame_replay.add)(run.buffer, newest_frame(out.obs), actions, clip_reward(out.reward),
                                            out.terminated, out.truncated, out.first)
        sketch = run.sketch
        for e in range(envs):  # one agent, one sketch: every environment's visit counts
            sketch = counts.update(sketch, columns[e], actions[e], real[e])
        episode_return = run.episode_return + out.reward
        return run.replace(
            sketch=sketch, buffer=buffer, obs=out.obs,
            episode_return=jnp.where(done, 0.0, episode_return),
            chunk=run.chunk.add_episodes(jnp.sum(jnp.where(done, episode_return, 0.0)), jnp.sum(done.astype(jnp.int32))),
            max_return=jnp.maximum(run.max_return, jnp.max(jnp.where(done, episode_return, -jnp.inf))),
            rooms=run.rooms.at[out.room].set(True),
        )

    def fill_returns(run: AtariRun, ended: jax.Array) -> AtariRun:
        fill = jax.vmap(frame_replay.fill_episode_returns, in_axes=(0, None, None, 0))
        return run.replace(buffer=fill(run.buffer, static.gamma, window, ended))

    # ---------------------------------------------------------------------------------- learning

    def sample_all_rings(run: AtariRun, key: jax.Array) -> frame_replay.FrameBatch:
        """``batch_size`` windows, an equal share from each environment's ring."""
        share = jax.vmap(frame_replay.sample, in_axes=(0, 0, None, None))(
            run.buffer, jax.random.split(key, envs), static.batch_size // envs, static.n_step)
        return jax.tree.map(lambda x: x.reshape((static.batch_size,) + x.shape[2:]), share)

    def update(run: AtariRun) -> AtariRun:
        hp = run.hparams
        key, k_sample = jax.random.split(run.key)
        batch = sample_all_rings(run, k_sample)
        step_columns = jax.vmap(jax.vmap(columns_of_frame))(batch.count_frames)
        step_counts = jax.vmap(jax.vmap(lambda cols, a: counts.query(run.sketch, cols, a)))(step_columns, batch.actions)
        intrinsic = intrinsic_reward(step_counts, hp.beta)
        partial, discount, _ = jax.vmap(n_step_return, in_axes=(0, 0, 0, None))(
            batch.rewards + intrinsic, batch.terminated, batch.included, static.gamma
        )
        next_columns = jax.vmap(columns_of_frame)(newest_frame(batch.next_obs))
        next_counts = jax.vmap(lambda cols: counts.query_all_actions(run.sketch, cols))(next_columns)
        values = bootstrap_value(q_values(run.target_params, batch.next_obs),
                                 optimism_bonus(next_counts, hp.c_bootstrap, hp.m))
        targets = mixed_monte_carlo(partial + discount * values, batch.mc_return, hp.beta_mmc)
        weight = batch.valid.astype(jnp.float32)

        def loss_fn(params):
            q = q_values(params, batch.obs)
            q_taken = jnp.take_along_axis(q, batch.actions[:, :1], axis=1)[:, 0]
            errors = jnp.square(q_taken - jax.lax.stop_gradient(targets))
            return jnp.sum(errors * weight) / jnp.maximum(jnp.sum(weight), 1.0)

        loss, grads = jax.value_and_grad(loss_fn)(run.params)
        updates, opt_state = optimiser.update(grads, run.opt_state, run.params)
        params = jax.tree.map(lambda p, u: p - hp.lr * u, run.params, updates)
        return run.replace(
            key=key, params=params, opt_state=opt_state, chunk=run.chunk.add_update(loss, jnp.mean(intrinsic[:, 0])),
        )

    def train_if_due(runs: AtariRun, iterations: jax.Array) -> AtariRun:
        """The updates due after ``iterations`` scan steps: one per ``train_every`` environment steps per run."""
        train_now = (iterations * envs > static.batch_size) & (iterations % iterations_per_update == 0)

        def train(r):
            for _ in range(updates_per_iteration):
                r = jax.vmap(update)(r)
            return r

        return jax.lax.cond(train_now, train, lambda r: r, runs)

    def env_step(state: AtariState, _) -> tuple[AtariState, None]:
        runs, actions, columns = jax.vmap(choose_actions, in_axes=(0, None))(state.runs, state.step)
        stored = state.step + 1
        if overlap:
            handle = pool.send(state.handle, actions.reshape(-1))
            # the barriers pin the update between the send and the receive
            runs, handle = jax.lax.optimization_barrier((runs, handle))
            runs = train_if_due(runs, state.step)
            runs, handle = jax.lax.optimization_barrier((runs, handle))
            handle, out = pool.recv(handle)
        else:
            handle, out = pool.step(state.handle, actions.reshape(-1))
        out = by_run(out)
        runs = jax.vmap(record)(runs, actions, columns, out)
        ended = out.terminated | out.truncated
        runs = jax.lax.cond(jnp.any(ended), jax.vmap(fill_returns), lambda r, e: r, runs, ended)
        if not overlap:
            runs = train_if_due(runs, stored)
        runs = jax.lax.cond((stored * envs) % static.target_update == 0,
                            jax.vmap(lambda r: r.replace(target_params=r.params)), lambda r: r, runs)
        return AtariState(step=stored, handle=handle, runs=runs), None

    # ---------------------------------------------------------------------------------- metrics

    def chunk_metrics(run: AtariRun, step: jax.Array) -> tuple[AtariRun, dict[str, jax.Array]]:
        hp = run.hparams
        metrics = {
            **run.chunk.means(),
            "max_return": jnp.where(jnp.isfinite(run.max_return), run.max_return, jnp.nan),
            "rooms_visited": jnp.sum(run.rooms).astype(jnp.float32),
            "epsilon": linear_epsilon(step * envs, hp.epsilon_start, hp.epsilon_end, hp.epsilon_decay_steps),
        }
        return run.replace(chunk=ChunkStats.zeros()), metrics

    def train_chunk(state: AtariState) -> tuple[AtariState, dict[str, jax.Array]]:
        state, _ = jax.lax.scan(env_step, state, None, length=static.log_every // envs)
        runs, metrics = jax.vmap(chunk_metrics, in_axes=(0, None))(state.runs, state.step)
        return state.replace(runs=runs), metrics

    return AtariTrainer(static=static, network=network, init=init, train_chunk=train_chunk)


# ------------------------------------------------------------------------------------ host loop


def state_bytes_per_run(static: StaticConfig) -> int:
    """Device bytes of one Montezuma run's state (replay frames dominate: 7,056 bytes per slot)."""
    class _Shapes:  # the pool's shapes without starting emulators
        num_actions, obs_shape, max_episode_steps = 18, (4, 84, 84), 4500

    trainer = make_atari_train(static, _Shapes)
    keys = jax.random.split(jax.random.key(0), 1)
    n = static.envs_per_run
    first = StepOutput(obs=jnp.zeros((n, 4, 84, 84), jnp.uint8), reward=jnp.zeros(n), terminated=jnp.zeros(n, bool),
                       truncated=jnp.zeros(n, bool), first=jnp.ones(n, bool), room=jnp.ones(n, jnp.int32),
                       lives=jnp.zeros(n, jnp.int32))
    shapes = jax.eval_shape(trainer.init, keys, stack_hparams([make_hparams()]), jnp.zeros(8, jnp.uint8), first)
    return tree_bytes(shapes.runs)


def run_atari_experiment(experiment, out, progress: bool = True, max_seconds: float | None = None,
                         **pool_overrides) -> AtariState:
    """Trains every run of ``experiment`` on Montezuma, ``envs_per_run`` pool environments per run; writes ``out``.

    The results folder has the same ``config.json`` and tidy ``metrics.csv`` as the other
    environments, plus ``run_info.json`` (device, wall-clock, environment steps per second). The
    emulators' state lives in EnvPool, outside JAX, so an experiment cannot be resumed: an
    unfinished folder is started again from the beginning (``max_seconds`` stops it early, keeping
    the metrics written so far).
    """
    out = Path(out)
    static = experiment.static
    num_runs = len(experiment.runs)
    per_run = state_bytes_per_run(static)
    require_fits(per_run, num_runs, headroom=1.2)  # the replay dominates; no checkpoint copy, few temporaries
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / CONFIG_FILE, json.dumps(experiment.to_json(), indent=1).encode())
    (out / METRICS_FILE).unlink(missing_ok=True)

    pool = MontezumaPool(num_envs=num_runs * static.envs_per_run, seed=experiment.seed, **pool_overrides)
    trainer = make_atari_train(static, pool)
    handle, first = pool.reset()
    run_keys, _ = run_keys_for(experiment)
    hparams = stack_hparams([r.hparams for r in experiment.runs])
    started = time.monotonic()
    state = jax.jit(trainer.init)(run_keys, hparams, handle, first)
    train_chunk = jax.jit(trainer.train_chunk, donate_argnums=0)
    num_chunks = static.total_steps // static.log_every
    bar = tqdm(total=static.total_steps, unit="step", disable=not progress, desc=f"montezuma x{num_runs} runs",
               dynamic_ncols=True)
    compile_done, chunk = None, 0
    while chunk < num_chunks:
        state, metrics = train_chunk(state)
        metrics = jax.device_get(metrics)
        chunk += 1
        if compile_done is None:
            compile_done = time.monotonic()
        append_metrics(out, experiment, chunk * static.log_every, metrics, ATARI_METRICS)
        returns = metrics["train_return"][np.isfinite(metrics["train_return"])]
        bar.set_postfix_str(f"return {np.median(returns) if returns.size else float('nan'):.3g}, "
                            f"rooms {np.median(metrics['rooms_visited']):.0f}")
        bar.update(static.log_every)
        if max_seconds is not None and time.monotonic() - started >= max_seconds:
            break
    bar.close()
    seconds = time.monotonic() - started
    steady = time.monotonic() - compile_done
    info = dict(device=jax.devices()[0].device_kind, runs=num_runs, steps_per_run=chunk * static.log_every,
                finished=chunk == num_chunks, seconds=seconds,
                env_steps_per_second=(chunk - 1) * static.log_every * num_runs / steady if chunk > 1 else None,
                state_bytes_per_run=per_run)
    (out / "run_info.json").write_text(json.dumps(info, indent=1))
    return state
