"""One compiled trainer for every run of an experiment.

``make_train(static)`` returns a :class:`Trainer` of pure functions:

* ``init(run_keys, env_keys, hparams) -> TrainState``: every leaf of ``state.runs`` has a leading
  runs axis; ``run_keys`` seed the networks, SimHash matrices and the acting/learning randomness,
  ``env_keys`` draw each run's action randomisation (pass one key repeated for a shared mask).
* ``train_chunk(state) -> (state, metrics)``: a ``lax.scan`` over ``static.log_every`` environment
  steps for all runs at once, then one greedy test episode per run and the chunk's metrics.

Order within one environment step (``REFERENCE.md``): choose the action with the counts as they are,
step the environment, increment ``N(s_t, a_t)``, store the transition, then train. What is common
to all runs (the step counter, "train now", "copy the target now") stays outside the vmap, so it
remains a real ``lax.cond`` instead of a select that would run both branches for every run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from envs import Maze, RandomisedChain

from . import counts, replay
from .config import HParams, StaticConfig
from .networks import init_params, make_network
from .optimism import intrinsic_reward, linear_epsilon, optimism_bonus
from .targets import bootstrap_value, n_step_return, td_loss, window_mask

METRICS = (
    "train_return",  # mean return of the training episodes that ended in the chunk (NaN if none)
    "episodes",  # training episodes that ended in the chunk
    "test_return",  # return of one greedy episode on plain Q
    "max_return",  # largest training episode return so far
    "states_visited",  # distinct environment cells visited so far
    "state_actions_visited",  # distinct (cell, action) pairs taken so far
    "q_start",  # max_a Q(s_0, a)
    "qplus_start",  # max_a Q(s_0, a) + C_action / (N(s_0, a) + 1)^M
    "loss",  # mean TD loss of the chunk's updates
    "epsilon",  # epsilon at the end of the chunk
)


@struct.dataclass
class Transition:
    """One stored environment step, compact: observations are rebuilt from ``compact`` on demand."""

    compact: jax.Array  # [compact_dim]: s_t (int32 cell coordinates; float32 observation for gymnax envs)
    action: jax.Array  # int32
    reward: jax.Array  # float32: the training reward (after R-Subtract)
    terminated: jax.Array  # bool: s_{t+1} is a true terminal
    done: jax.Array  # bool: the episode ended at this step (terminated or truncated)
    next_compact: jax.Array  # int32[compact_dim]: s_{t+1} before any auto-reset


@struct.dataclass
class EpisodeStats:
    episode_return: jax.Array  # return of the running episode
    chunk_return_sum: jax.Array
    chunk_episodes: jax.Array
    max_return: jax.Array
    chunk_loss_sum: jax.Array
    chunk_updates: jax.Array
    visited_states: jax.Array  # bool[num_cells]
    visited_state_actions: jax.Array  # bool[num_cells, num_actions]


@struct.dataclass
class RunState:
    key: jax.Array
    hparams: HParams
    params: Any
    target_params: Any
    opt_state: Any
    env_params: Any
    env_state: Any
    obs: jax.Array
    hash_matrix: jax.Array  # float32[k, obs_dim] (SimHash) or float32[0] (exact counts)
    cell_columns: jax.Array  # int32[num_cells, rows]: sketch columns of every cell, computed once
    sketch: jax.Array  # int32[num_actions, rows, width]
    buffer: replay.ReplayBuffer
    stats: EpisodeStats


@struct.dataclass
class TrainState:
    step: jax.Array  # int32 scalar: environment steps taken by every run
    runs: RunState  # leading runs axis on every leaf


@dataclasses.dataclass(frozen=True)
class Trainer:
    static: StaticConfig
    env: Any
    network: Any
    init: Callable[[jax.Array, jax.Array, HParams], TrainState]
    train_chunk: Callable[[TrainState], tuple[TrainState, dict[str, jax.Array]]]
    q_values: Callable[[Any, jax.Array], jax.Array]
    count_columns: Callable[[RunState, jax.Array], jax.Array]
    targets: Callable[[RunState, Transition, jax.Array], jax.Array]


def make_env(static: StaticConfig):
    """The environment object named by ``static.env``."""
    if static.env == "chain":
        return RandomisedChain(length=static.chain_length)
    if static.env == "maze":
        return Maze()
    if static.env.startswith("gymnax:"):
        from envs.gymnax_adapter import GymnaxAdapter  # imports gymnax's registry only when asked

        return GymnaxAdapter(static.env.removeprefix("gymnax:"), **dict(static.env_kwargs))
    raise ValueError(f"unknown env {static.env!r}")


def network_name(static: StaticConfig, env) -> str:
    """``static.network``, or for ``auto`` an MLP for vector observations and the small conv net for images."""
    if static.network != "auto":
        return static.network
    shape = env.observation_space(env.default_params).shape
    return "maze_conv" if len(shape) == 3 else "mlp"


def make_optimiser(static: StaticConfig) -> optax.GradientTransformation:
    """Global-norm clip then PyTorch-style RMSProp scaling; the per-run learning rate is applied after."""
    return optax.chain(
        optax.clip_by_global_norm(static.grad_clip),
        optax.scale_by_rms(decay=static.rms_decay, eps=static.rms_eps, eps_in_sqrt=False),
    )


def make_train(static: StaticConfig, env: Any | None = None) -> Trainer:
    """Builds the pure ``init`` and ``train_chunk`` functions of one experiment."""
    static.validate()
    env = make_env(static) if env is None else env
    network = make_network(network_name(static, env), env.num_actions, static.hidden)
    has_cell_table = hasattr(env, "all_compacts")
    optimiser = make_optimiser(static)
    num_actions = env.num_actions
    horizon = int(env.default_params.max_steps_in_episode)
    obs_dim = int(np.prod(env.observation_space(env.default_params).shape))

    def q_values(params, obs: jax.Array) -> jax.Array:
        """Q(s, .) for a batch of observations."""
        return network.apply(params, obs)

    def columns_of(hash_matrix: jax.Array, env_params, compact: jax.Array) -> jax.Array:
        """Sketch columns of the state ``compact`` under the run's counting features."""
        if static.count_features == "exact":
            code = counts.cell_code(env.cell_id(compact))
        else:
            code = counts.simhash_code(hash_matrix, env.obs_from_compact(compact, env_params))
        return counts.sketch_columns(code, static.sketch_rows, static.sketch_width)

    def count_columns(run: RunState, compact: jax.Array) -> jax.Array:
        """Sketch columns of ``compact``, looked up in the run's per-cell table where there is one.

        The chain and the maze have few cells, so every cell's code is computed once at ``init``:
        counting then costs a lookup per state instead of a projection, and a state's code cannot
        depend on how (batched or not) it was computed. Other environments hash every time.
        """
        if has_cell_table:
            return run.cell_columns[env.cell_id(compact)]
        return columns_of(run.hash_matrix, run.env_params, compact)

    # ---------------------------------------------------------------------------------- init

    def init_run(run_key: jax.Array, env_key: jax.Array, hp: HParams) -> RunState:
        k_net, k_hash, k_reset, k_loop = jax.random.split(run_key, 4)
        env_params = env.sample_params(env_key)
        obs, env_state = env.reset(k_reset, env_params)
        params = init_params(network, k_net, obs, hp.final_bias)
        if static.count_features == "simhash":
            hash_matrix = counts.simhash_matrix(k_hash, static.simhash_bits, obs_dim)
        else:
            hash_matrix = jnp.zeros((0,), jnp.float32)
        compact = env.compact_state(env_state)
        example = Transition(
            compact=compact, action=jnp.int32(0), reward=jnp.float32(0), terminated=jnp.bool_(False),
            done=jnp.bool_(False), next_compact=compact,
        )
        stats = EpisodeStats(
            episode_return=jnp.float32(0), chunk_return_sum=jnp.float32(0), chunk_episodes=jnp.int32(0),
            max_return=jnp.float32(-jnp.inf), chunk_loss_sum=jnp.float32(0), chunk_updates=jnp.int32(0),
            visited_states=jnp.zeros((env.num_cells,), bool).at[env.cell_id(compact)].set(True),
            visited_state_actions=jnp.zeros((env.num_cells, num_actions), bool),
        )
        return RunState(
            key=k_loop, hparams=hp, params=params, target_params=params, opt_state=optimiser.init(params),
            env_params=env_params, env_state=env_state, obs=obs, hash_matrix=hash_matrix,
            cell_columns=(jax.vmap(lambda c: columns_of(hash_matrix, env_params, c))(env.all_compacts())
                          if has_cell_table else jnp.zeros((0, static.sketch_rows), jnp.int32)),
            sketch=counts.init_sketch(num_actions, static.sketch_rows, static.sketch_width),
            buffer=replay.init(example, static.buffer_size), stats=stats,
        )

    def init(run_keys: jax.Array, env_keys: jax.Array, hparams: HParams) -> TrainState:
        num_runs = run_keys.shape[0]
        chex.assert_tree_shape_prefix(hparams, (num_runs,))
        chex.assert_shape(env_keys, run_keys.shape)
        runs = jax.vmap(init_run)(run_keys, env_keys, hparams)
        return TrainState(step=jnp.int32(0), runs=runs)

    # ---------------------------------------------------------------------------------- acting

    def act_and_store(run: RunState, step: jax.Array) -> RunState:
        hp = run.hparams
        key, k_explore, k_random, k_env = jax.random.split(run.key, 4)
        compact = env.compact_state(run.env_state)
        columns = count_columns(run, compact)
        q = q_values(run.params, run.obs[None])[0]
        n_sa = counts.query_all_actions(run.sketch, columns)
        greedy = jnp.argmax(q + optimism_bonus(n_sa, hp.c_action, hp.m))
        epsilon = linear_epsilon(step, hp.epsilon_start, hp.epsilon_end, hp.epsilon_decay_steps)
        explore = jax.random.uniform(k_explore) < epsilon
        action = jnp.where(explore, jax.random.randint(k_random, (), 0, num_actions), greedy).astype(jnp.int32)

        obs, env_state, reward, terminated, truncated, info = env.step(k_env, run.env_state, action, run.env_params)
        done = jnp.logical_or(terminated, truncated)
        sketch = counts.update(run.sketch, columns, action)
        transition = Transition(
            compact=compact, action=action, reward=(reward - hp.reward_subtract).astype(jnp.float32),
            terminated=terminated, done=done, next_compact=info["compact"],
        )
        stats = run.stats
        episode_return = stats.episode_return + reward
        cell = env.cell_id(compact)
        stats = stats.replace(
            episode_return=jnp.where(done, 0.0, episode_return),
            chunk_return_sum=stats.chunk_return_sum + jnp.where(done, episode_return, 0.0),
            chunk_episodes=stats.chunk_episodes + done.astype(jnp.int32),
            max_return=jnp.where(done, jnp.maximum(stats.max_return, episode_return), stats.max_return),
            visited_states=stats.visited_states.at[info["cell_id"]].set(True),
            visited_state_actions=stats.visited_state_actions.at[cell, action].set(True),
        )
        return run.replace(
            key=key, obs=obs, env_state=env_state, sketch=sketch,
            buffer=replay.add(run.buffer, transition), stats=stats,
        )

    # ---------------------------------------------------------------------------------- learning

    def targets_for(run: RunState, windows: Transition, exists: jax.Array) -> jax.Array:
        """n-step targets with intrinsic rewards recomputed from the current counts (every step)."""
        hp = run.hparams
        included = window_mask(windows.done, exists)
        step_columns = jax.vmap(jax.vmap(lambda c: count_columns(run, c)))(windows.compact)
        step_counts = jax.vmap(jax.vmap(lambda cols, a: counts.query(run.sketch, cols, a)))(step_columns, windows.action)
        rewards = windows.reward + intrinsic_reward(step_counts, hp.beta)
        partial, discount, last = jax.vmap(n_step_return, in_axes=(0, 0, 0, None))(
            rewards, windows.terminated, included, static.gamma
        )
        next_compact = jnp.take_along_axis(windows.next_compact, last[:, None, None], axis=1)[:, 0]
        next_obs = jax.vmap(env.obs_from_compact, in_axes=(0, None))(next_compact, run.env_params)
        next_columns = jax.vmap(lambda c: count_columns(run, c))(next_compact)
        next_counts = jax.vmap(lambda cols: counts.query_all_actions(run.sketch, cols))(next_columns)
        q_next = q_values(run.target_params, next_obs)
        values = bootstrap_value(q_next, optimism_bonus(next_counts, hp.c_bootstrap, hp.m))
        return partial + discount * values

    def update(run: RunState) -> RunState:
        key, k_sample = jax.random.split(run.key)
        windows, exists = replay.sample_windows(run.buffer, k_sample, static.batch_size, static.n_step)
        targets = targets_for(run, windows, exists)
        first = jax.tree.map(lambda x: x[:, 0], windows)
        obs = jax.vmap(env.obs_from_compact, in_axes=(0, None))(first.compact, run.env_params)

        def loss_fn(params):
            q = q_values(params, obs)
            q_taken = jnp.take_along_axis(q, first.action[:, None], axis=1)[:, 0]
            return td_loss(q_taken, targets)

        loss, grads = jax.value_and_grad(loss_fn)(run.params)
        updates, opt_state = optimiser.update(grads, run.opt_state, run.params)
        params = jax.tree.map(lambda p, u: p - run.hparams.lr * u, run.params, updates)
        stats = run.stats.replace(
            chunk_loss_sum=run.stats.chunk_loss_sum + loss, chunk_updates=run.stats.chunk_updates + 1
        )
        return run.replace(key=key, params=params, opt_state=opt_state, stats=stats)

    def copy_target(run: RunState) -> RunState:
        return run.replace(target_params=run.params)

    def env_step(state: TrainState, _) -> tuple[TrainState, None]:
        runs = jax.vmap(act_and_store, in_axes=(0, None))(state.runs, state.step)
        stored = state.step + 1
        train_now = (stored >= static.batch_size + 1) & (stored % static.train_every == 0)
        runs = jax.lax.cond(train_now, jax.vmap(update), lambda r: r, runs)
        runs = jax.lax.cond(stored % static.target_update == 0, jax.vmap(copy_target), lambda r: r, runs)
        return TrainState(step=stored, runs=runs), None

    # ---------------------------------------------------------------------------------- metrics

    def greedy_test_return(run: RunState) -> tuple[jax.Array, jax.Array]:
        """One episode acting greedily on plain Q (the paper's test protocol); uses its own key."""
        key, k_reset, k_steps = jax.random.split(run.key, 3)
        obs, env_state = env.reset(k_reset, run.env_params)

        def body(carry, k):
            obs, env_state, total, alive = carry
            action = jnp.argmax(q_values(run.params, obs[None])[0])
            obs, env_state, reward, terminated, truncated, _ = env.step(k, env_state, action, run.env_params)
            total = total + jnp.where(alive, reward, 0.0)
            alive = alive & ~(terminated | truncated)
            return (obs, env_state, total, alive), None

        (_, _, total, _), _ = jax.lax.scan(
            body, (obs, env_state, jnp.float32(0), jnp.bool_(True)), jax.random.split(k_steps, horizon)
        )
        return total, key

    def chunk_metrics(run: RunState, step: jax.Array) -> tuple[RunState, dict[str, jax.Array]]:
        hp = run.hparams
        test_return, key = greedy_test_return(run)
        start = env.start_compact(run.env_params)
        q0 = q_values(run.params, env.obs_from_compact(start, run.env_params)[None])[0]
        n0 = counts.query_all_actions(run.sketch, count_columns(run, start))
        stats = run.stats
        metrics = {
            "train_return": jnp.where(
                stats.chunk_episodes > 0, stats.chunk_return_sum / jnp.maximum(stats.chunk_episodes, 1), jnp.nan
            ),
            "episodes": stats.chunk_episodes.astype(jnp.float32),
            "test_return": test_return,
            "max_return": jnp.where(jnp.isfinite(stats.max_return), stats.max_return, jnp.nan),
            "states_visited": jnp.sum(stats.visited_states).astype(jnp.float32),
            "state_actions_visited": jnp.sum(stats.visited_state_actions).astype(jnp.float32),
            "q_start": jnp.max(q0),
            "qplus_start": jnp.max(q0 + optimism_bonus(n0, hp.c_action, hp.m)),
            "loss": jnp.where(stats.chunk_updates > 0, stats.chunk_loss_sum / jnp.maximum(stats.chunk_updates, 1), jnp.nan),
            "epsilon": linear_epsilon(step, hp.epsilon_start, hp.epsilon_end, hp.epsilon_decay_steps),
        }
        stats = stats.replace(
            chunk_return_sum=jnp.float32(0), chunk_episodes=jnp.int32(0),
            chunk_loss_sum=jnp.float32(0), chunk_updates=jnp.int32(0),
        )
        return run.replace(key=key, stats=stats), metrics

    def train_chunk(state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        state, _ = jax.lax.scan(env_step, state, None, length=static.log_every)
        runs, metrics = jax.vmap(chunk_metrics, in_axes=(0, None))(state.runs, state.step)
        return TrainState(step=state.step, runs=runs), metrics

    return Trainer(
        static=static, env=env, network=network, init=init, train_chunk=train_chunk,
        q_values=q_values, count_columns=count_columns, targets=targets_for,
    )
