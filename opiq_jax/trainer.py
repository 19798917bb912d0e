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

The baselines that need networks of their own are static switches of this one trainer:
``static.bonus_network`` adds DORA's E-network or RND's predictor and target (``RunState.dora`` /
``RunState.rnd``), and ``static.bsp_heads = K`` makes the Q-network K-headed with a fixed prior
(``RunState.prior_params``). Every Q-value inside the trainer carries a heads axis ``[..., K, A]``
(``K = 1`` without BSP), so one code path serves all methods.
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

from . import bonuses, counts, replay
from .config import HParams, StaticConfig
from .networks import (
    in_compute_precision, init_params, make_bootstrapped_network, make_network, scale_torso_gradients, zero_final_layer,
)
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
    "intrinsic_reward",  # mean intrinsic reward of the chunk's sampled transitions (all bonus sources)
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


def chunk_mean(total: jax.Array, count: jax.Array) -> jax.Array:
    """``total / count`` for a chunk's metric, NaN when nothing was counted in the chunk."""
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


@struct.dataclass
class ChunkStats:
    """Sums over the steps since the last metrics row, which turns them into means and resets them."""

    return_sum: jax.Array  # float32: returns of the episodes that ended
    episodes: jax.Array  # int32: episodes that ended
    loss_sum: jax.Array  # float32: TD loss of each update
    updates: jax.Array  # int32
    intrinsic_sum: jax.Array  # float32: mean intrinsic reward of each update's sampled steps

    @classmethod
    def zeros(cls) -> ChunkStats:
        zero_sum, zero_count = jnp.float32(0), jnp.int32(0)
        return cls(return_sum=zero_sum, episodes=zero_count, loss_sum=zero_sum, updates=zero_count,
                   intrinsic_sum=zero_sum)

    def add_episodes(self, returns_sum: jax.Array, ended: jax.Array) -> ChunkStats:
        """``ended`` episodes ended with returns summing to ``returns_sum``."""
        return self.replace(return_sum=self.return_sum + returns_sum, episodes=self.episodes + ended)

    def add_update(self, loss: jax.Array, intrinsic_mean: jax.Array) -> ChunkStats:
        return self.replace(loss_sum=self.loss_sum + loss, updates=self.updates + 1,
                            intrinsic_sum=self.intrinsic_sum + intrinsic_mean)

    def means(self) -> dict[str, jax.Array]:
        """The chunk's metrics rows: ``train_return``, ``episodes``, ``loss``, ``intrinsic_reward``."""
        return {
            "train_return": chunk_mean(self.return_sum, self.episodes),
            "episodes": self.episodes.astype(jnp.float32),
            "loss": chunk_mean(self.loss_sum, self.updates),
            "intrinsic_reward": chunk_mean(self.intrinsic_sum, self.updates),
        }


@struct.dataclass
class EpisodeStats:
    episode_return: jax.Array  # return of the running episode
    chunk: ChunkStats
    max_return: jax.Array
    visited_states: jax.Array  # bool[num_cells]
    visited_state_actions: jax.Array  # bool[num_cells, num_actions]


@struct.dataclass
class DoraState:
    """DORA's E-value network (logits; E = sigmoid), its optimiser and its small ring of recent steps."""

    params: Any
    opt_state: Any
    buffer: replay.ReplayBuffer


@struct.dataclass
class RndState:
    """RND's trained predictor, its optimiser and the fixed random target network."""

    params: Any
    opt_state: Any
    target_params: Any


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
    active_head: jax.Array  # int32: the BSP head acting in this episode (0 without BSP)
    prior_params: Any = None  # BSP's fixed random prior network (None without BSP)
    compute_params: Any = None  # precision=bfloat16: the bfloat16 copy of params the forward passes read; else None
    target_table: jax.Array | None = None  # float32[num_cells, K, A]: the target network at every cell, or None
    dora: DoraState | None = None
    rnd: RndState | None = None


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
    head_values: Callable[[RunState, Any, jax.Array], jax.Array]
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


def uses_pallas_torso(static: StaticConfig, net_name: str) -> bool:
    """Whether the maze network's convolutions run as Pallas kernels (``StaticConfig.maze_torso``)."""
    if net_name != "maze_conv" or static.maze_torso == "xla":
        return False
    return static.maze_torso == "pallas" or (static.precision == "bfloat16" and jax.default_backend() == "gpu")


def uses_target_table(static: StaticConfig, env: Any) -> bool:
    """Whether the targets look the target network's values up per cell (``StaticConfig.target_values``)."""
    has_cell_table = hasattr(env, "all_compacts")
    if static.target_values == "table" and not has_cell_table:
        raise ValueError(f"target_values='table' needs an environment with a cell table (chain, maze), not {static.env!r}")
    if static.target_values == "auto":
        return has_cell_table and static.precision == "bfloat16"
    return static.target_values == "table"


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
    num_actions = env.num_actions
    net_name = network_name(static, env)
    num_heads = max(1, static.bsp_heads)
    compute_dtype = jnp.dtype(static.precision)
    mixed_precision = compute_dtype != jnp.float32
    if static.bsp_heads:
        network = make_bootstrapped_network(net_name, num_actions, static.bsp_heads, static.hidden, compute_dtype)
    else:
        network = make_network(net_name, num_actions, static.hidden, compute_dtype, uses_pallas_torso(static, net_name))
    e_network = make_network(net_name, num_actions, static.hidden)  # DORA's E-values (logits)
    rnd_network = make_network(net_name, static.rnd_outputs, static.hidden)
    has_cell_table = hasattr(env, "all_compacts")
    table = uses_target_table(static, env)
    optimiser = make_optimiser(static)
    horizon = int(env.default_params.max_steps_in_episode)
    obs_dim = int(np.prod(env.observation_space(env.default_params).shape))

    def q_values(params, obs: jax.Array) -> jax.Array:
        """The Q-network's output for a batch of observations: ``[B, A]`` (``[B, K, A]`` for BSP, no prior)."""
        return network.apply(params, obs)

    def head_values(run: RunState, params, obs: jax.Array) -> jax.Array:
        """``[B, K, A]``: what each head acts and bootstraps on (BSP: ``Q_k + beta_bsp * p_k``; else ``K = 1``)."""
        if not static.bsp_heads:
            return q_values(params, obs)[:, None, :]
        return bonuses.with_prior(q_values(params, obs), q_values(run.prior_params, obs), run.hparams.beta_bsp)

    def obs_of(run: RunState, compact: jax.Array) -> jax.Array:
        """Observations of a batch of compact states (any leading shape)."""
        lead = compact.shape[: compact.ndim - 1]
        flat = compact.reshape((-1, compact.shape[-1]))
        obs = jax.vmap(env.obs_from_compact, in_axes=(0, None))(flat, run.env_params)
        return obs.reshape(lead + obs.shape[1:])

    def apply_flat(net, params, obs: jax.Array, lead: tuple[int, ...]) -> jax.Array:
        """``net`` on observations with leading shape ``lead``, flattened into one batch and back."""
        flat = obs.reshape((-1,) + obs.shape[len(lead):])
        out = net.apply(params, flat)
        return out.reshape(lead + out.shape[1:])

    def columns_of(hash_matrix: jax.Array, env_params, compact: jax.Array) -> jax.Array:
        """Sketch columns of the state ``compact`` under the run's counting features."""
        if static.count_features == "exact":
            code = counts.cell_code(env.cell_id(compact))
        else:
            code = counts.simhash_code(hash_matrix, env.obs_from_compact(compact, env_params))
        return counts.sketch_columns(code, static.sketch_rows, static.sketch_width)

    def cell_values(run: RunState, params) -> jax.Array:
        """``[num_cells, K, A]``: ``head_values`` at every cell of the environment's cell table."""
        return head_values(run, params, obs_of(run, env.all_compacts()))

    def with_target(run: RunState, params) -> RunState:
        """``run`` with ``params`` as its target network (and that network's values at every cell)."""
        run = run.replace(target_params=params)
        return run.replace(target_table=cell_values(run, params)) if table else run

    def count_columns(run: RunState, compact: jax.Array) -> jax.Array:
        """Sketch columns of ``compact``, looked up in the run's per-cell table where there is one.

        The chain and the maze have few cells, so every cell's code is computed once at ``init``:
        counting then costs a lookup per state instead of a projection, and a state's code cannot
        depend on how (batched or not) it was computed. Other environments hash every time.
        """
        if has_cell_table:
            return run.cell_columns[env.cell_id(compact)]
        return columns_of(run.hash_matrix, run.env_params, compact)

    def sgd_step(params, opt_state, grads, lr):
        grads = jax.tree.map(lambda g: g.astype(jnp.float32), grads)  # bfloat16 under mixed precision
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return jax.tree.map(lambda p, u: p - lr * u, params, updates), opt_state

    def forward_params(run: RunState):
        """What acting, the loss and the test episodes evaluate: ``params`` itself in float32."""
        return run.compute_params if mixed_precision else run.params

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
            episode_return=jnp.float32(0), chunk=ChunkStats.zeros(), max_return=jnp.float32(-jnp.inf),
            visited_states=jnp.zeros((env.num_cells,), bool).at[env.cell_id(compact)].set(True),
            visited_state_actions=jnp.zeros((env.num_cells, num_actions), bool),
        )
        # the baselines' extra networks draw from a key of their own, so the shared streams stay unchanged
        k_prior, k_e, k_pred, k_tgt, k_head = jax.random.split(jax.random.fold_in(run_key, 0xBA5E), 5)
        extra = {}
        if static.bsp_heads:
            extra["prior_params"] = network.init(k_prior, obs[None])
        if static.bonus_network == "dora":
            e_params = zero_final_layer(e_network.init(k_e, obs[None]))
            extra["dora"] = DoraState(
                params=e_params, opt_state=optimiser.init(e_params),
                buffer=replay.init(example, static.dora_buffer_factor * static.batch_size),
            )
        if static.bonus_network == "rnd":
            predictor = rnd_network.init(k_pred, obs[None])
            extra["rnd"] = RndState(params=predictor, opt_state=optimiser.init(predictor),
                                    target_params=rnd_network.init(k_tgt, obs[None]))
        if mixed_precision:
            extra["compute_params"] = in_compute_precision(params, compute_dtype)
        run = RunState(
            key=k_loop, hparams=hp, params=params, target_params=None, opt_state=optimiser.init(params),
            env_params=env_params, env_state=env_state, obs=obs, hash_matrix=hash_matrix,
            cell_columns=(jax.vmap(lambda c: columns_of(hash_matrix, env_params, c))(env.all_compacts())
                          if has_cell_table else jnp.zeros((0, static.sketch_rows), jnp.int32)),
            sketch=counts.init_sketch(num_actions, static.sketch_rows, static.sketch_width),
            buffer=replay.init(example, static.buffer_size), stats=stats,
            active_head=jax.random.randint(k_head, (), 0, num_heads), **extra,
        )
        return with_target(run, in_compute_precision(params, compute_dtype))

    def init(run_keys: jax.Array, env_keys: jax.Array, hparams: HParams) -> TrainState:
        num_runs = run_keys.shape[0]
        chex.assert_tree_shape_prefix(hparams, (num_runs,))
        chex.assert_shape(env_keys, run_keys.shape)
        runs = jax.vmap(init_run)(run_keys, env_keys, hparams)
        return TrainState(step=jnp.int32(0), runs=runs)

    # ---------------------------------------------------------------------------------- acting

    def action_bonus(run: RunState, obs: jax.Array, n_sa: jax.Array) -> jax.Array:
        """What is added to Q for action selection: OPIQ's ``C_action / (N + 1)^M`` and DORA OA's bonus."""
        bonus = optimism_bonus(n_sa, run.hparams.c_action, run.hparams.m)
        if static.bonus_network == "dora":
            bonus = bonus + bonuses.dora_bonus(e_network.apply(run.dora.params, obs[None])[0], run.hparams.beta_dora_action)
        return bonus

    def act_and_store(run: RunState, step: jax.Array) -> RunState:
        hp = run.hparams
        key, k_explore, k_random, k_env = jax.random.split(run.key, 4)
        compact = env.compact_state(run.env_state)
        columns = count_columns(run, compact)
        q = head_values(run, forward_params(run), run.obs[None])[0, run.active_head]
        n_sa = counts.query_all_actions(run.sketch, columns)
        greedy = jnp.argmax(q + action_bonus(run, run.obs, n_sa))
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
            chunk=stats.chunk.add_episodes(jnp.where(done, episode_return, 0.0), done.astype(jnp.int32)),
            max_return=jnp.where(done, jnp.maximum(stats.max_return, episode_return), stats.max_return),
            visited_states=stats.visited_states.at[info["cell_id"]].set(True),
            visited_state_actions=stats.visited_state_actions.at[cell, action].set(True),
        )
        extra = {}
        if static.bonus_network == "dora":
            extra["dora"] = run.dora.replace(buffer=replay.add(run.dora.buffer, transition))
        return run.replace(
            key=key, obs=obs, env_state=env_state, sketch=sketch,
            buffer=replay.add(run.buffer, transition), stats=stats,
            active_head=jnp.where(done, jax.random.randint(jax.random.fold_in(k_env, 1), (), 0, num_heads),
                                  run.active_head), **extra,
        )

    # ---------------------------------------------------------------------------------- learning

    def intrinsic_rewards(run: RunState, windows: Transition) -> jax.Array:
        """``[B, n]`` intrinsic reward of every sampled step, recomputed from the current bonus sources."""
        hp = run.hparams
        step_columns = jax.vmap(jax.vmap(lambda c: count_columns(run, c)))(windows.compact)
        step_counts = jax.vmap(jax.vmap(lambda cols, a: counts.query(run.sketch, cols, a)))(step_columns, windows.action)
        reward = intrinsic_reward(step_counts, hp.beta)
        lead = windows.action.shape
        if static.bonus_network == "dora":
            logits = apply_flat(e_network, run.dora.params, obs_of(run, windows.compact), lead)
            taken = jnp.take_along_axis(logits, windows.action[..., None], axis=-1)[..., 0]
            reward = reward + bonuses.dora_bonus(taken, hp.beta_dora)
        if static.bonus_network == "rnd":  # the error at the state the step reached (Burda et al.)
            next_obs = obs_of(run, windows.next_compact)
            predicted = apply_flat(rnd_network, run.rnd.params, next_obs, lead)
            target = apply_flat(rnd_network, run.rnd.target_params, next_obs, lead)
            reward = reward + bonuses.rnd_bonus(predicted, target, hp.beta_rnd)
        return reward

    def targets_for(run: RunState, windows: Transition, exists: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``[B, K]`` n-step targets per head, with intrinsic rewards recomputed now; and the intrinsic rewards."""
        hp = run.hparams
        included = window_mask(windows.done, exists)
        intrinsic = intrinsic_rewards(run, windows)
        partial, discount, last = jax.vmap(n_step_return, in_axes=(0, 0, 0, None))(
            windows.reward + intrinsic, windows.terminated, included, static.gamma
        )
        next_compact = jnp.take_along_axis(windows.next_compact, last[:, None, None], axis=1)[:, 0]
        next_columns = jax.vmap(lambda c: count_columns(run, c))(next_compact)
        next_counts = jax.vmap(lambda cols: counts.query_all_actions(run.sketch, cols))(next_columns)
        if table:
            q_next = run.target_table[jax.vmap(env.cell_id)(next_compact)]  # [B, K, A]
        else:
            q_next = head_values(run, run.target_params, obs_of(run, next_compact))
        bonus = optimism_bonus(next_counts, hp.c_bootstrap, hp.m)[:, None, :]
        values = bootstrap_value(q_next, jnp.broadcast_to(bonus, q_next.shape))
        return partial[:, None] + discount[:, None] * values, intrinsic

    def td_loss_per_head(params, run: RunState, obs: jax.Array, actions: jax.Array, targets: jax.Array) -> jax.Array:
        """Sum over heads of each head's mean squared TD error (every head learns from every sample)."""
        q = head_values(run, params, obs)  # [B, K, A]
        q_taken = jnp.take_along_axis(q, jnp.broadcast_to(actions[:, None, None], q.shape[:2] + (1,)), axis=2)[..., 0]
        return num_heads * td_loss(q_taken, targets)

    def update_q(run: RunState, key: jax.Array) -> RunState:
        with jax.named_scope("sample"):
            windows, exists = replay.sample_windows(run.buffer, key, static.batch_size, static.n_step)
        with jax.named_scope("targets"):
            targets, intrinsic = targets_for(run, windows, exists)
        with jax.named_scope("loss_and_grad"):
            first = jax.tree.map(lambda x: x[:, 0], windows)
            obs = obs_of(run, first.compact)
            loss, grads = jax.value_and_grad(td_loss_per_head)(forward_params(run), run, obs, first.action, targets)
            if static.bsp_heads:
                grads = scale_torso_gradients(grads, 1.0 / static.bsp_heads)
        with jax.named_scope("optimiser"):
            params, opt_state = sgd_step(run.params, run.opt_state, grads, run.hparams.lr)
            extra = {"compute_params": in_compute_precision(params, compute_dtype)} if mixed_precision else {}
        stats = run.stats.replace(chunk=run.stats.chunk.add_update(loss / num_heads, jnp.mean(intrinsic[:, 0])))
        return run.replace(params=params, opt_state=opt_state, stats=stats, **extra)

    def update_dora(run: RunState, key: jax.Array) -> RunState:
        """One n-step SARSA step of the E-values (zero reward) on a batch from DORA's ring of recent steps."""
        windows, exists = replay.sample_windows(run.dora.buffer, key, static.batch_size, static.n_step + 1)
        lead = windows.action.shape
        next_e = jax.nn.sigmoid(apply_flat(e_network, run.dora.params, obs_of(run, windows.next_compact), lead))
        targets, _ = jax.vmap(bonuses.dora_sarsa_target, in_axes=(0, 0, 0, 0, 0, None))(
            next_e, windows.action, windows.done, windows.terminated, exists, static.dora_gamma
        )
        obs = obs_of(run, windows.compact[:, 0])

        def loss_fn(params):
            logits = e_network.apply(params, obs)
            e_taken = jax.nn.sigmoid(jnp.take_along_axis(logits, windows.action[:, :1], axis=1)[:, 0])
            return td_loss(e_taken, targets)

        grads = jax.grad(loss_fn)(run.dora.params)
        params, opt_state = sgd_step(run.dora.params, run.dora.opt_state, grads, run.hparams.lr)
        return run.replace(dora=run.dora.replace(params=params, opt_state=opt_state))

    def update_rnd(run: RunState) -> RunState:
        """One predictor step on the ``rnd_batch`` most recently reached states."""
        ages = jnp.arange(static.rnd_batch)
        slots = (run.buffer.position - 1 - ages) % run.buffer.capacity
        stored = (ages < run.buffer.size).astype(jnp.float32)
        obs = obs_of(run, run.buffer.items.next_compact[slots])
        target = rnd_network.apply(run.rnd.target_params, obs)

        def loss_fn(params):
            errors = jnp.sum(jnp.square(rnd_network.apply(params, obs) - target), axis=-1)
            return jnp.sum(errors * stored) / jnp.maximum(jnp.sum(stored), 1.0)

        grads = jax.grad(loss_fn)(run.rnd.params)
        params, opt_state = sgd_step(run.rnd.params, run.rnd.opt_state, grads, run.hparams.lr)
        return run.replace(rnd=run.rnd.replace(params=params, opt_state=opt_state))

    def update(run: RunState) -> RunState:
        key, k_q = jax.random.split(run.key)
        run = update_q(run, k_q)
        if static.bonus_network == "dora":
            with jax.named_scope("dora"):
                run = update_dora(run, jax.random.fold_in(k_q, 1))
        if static.bonus_network == "rnd":
            with jax.named_scope("rnd"):
                run = update_rnd(run)
        return run.replace(key=key)

    def copy_target(run: RunState) -> RunState:
        return with_target(run, forward_params(run))

    def env_step(state: TrainState, _) -> tuple[TrainState, None]:
        # the named scopes label the compiled ops for experiments/profile_step.py (no effect on the results)
        with jax.named_scope("act"):
            runs = jax.vmap(act_and_store, in_axes=(0, None))(state.runs, state.step)
        stored = state.step + 1
        train_now = (stored >= static.batch_size + 1) & (stored % static.train_every == 0)
        with jax.named_scope("update"):
            runs = jax.lax.cond(train_now, jax.vmap(update), lambda r: r, runs)
        with jax.named_scope("target_copy"):
            runs = jax.lax.cond(stored % static.target_update == 0, jax.vmap(copy_target), lambda r: r, runs)
        return TrainState(step=stored, runs=runs), None

    # ---------------------------------------------------------------------------------- metrics

    def greedy_action(run: RunState, obs: jax.Array) -> jax.Array:
        """The test policy: greedy on plain Q; for BSP the majority vote of the heads (prior included)."""
        return bonuses.majority_vote(head_values(run, forward_params(run), obs[None])[0])

    def greedy_test_return(run: RunState) -> tuple[jax.Array, jax.Array]:
        """One episode acting greedily on plain Q (the paper's test protocol); uses its own key."""
        key, k_reset, k_steps = jax.random.split(run.key, 3)
        obs, env_state = env.reset(k_reset, run.env_params)

        def body(carry, k):
            obs, env_state, total, alive = carry
            action = greedy_action(run, obs)
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
        start_obs = env.obs_from_compact(start, run.env_params)
        q0 = jnp.mean(head_values(run, forward_params(run), start_obs[None])[0], axis=0)
        n0 = counts.query_all_actions(run.sketch, count_columns(run, start))
        stats = run.stats
        metrics = {
            **stats.chunk.means(),
            "test_return": test_return,
            "max_return": jnp.where(jnp.isfinite(stats.max_return), stats.max_return, jnp.nan),
            "states_visited": jnp.sum(stats.visited_states).astype(jnp.float32),
            "state_actions_visited": jnp.sum(stats.visited_state_actions).astype(jnp.float32),
            "q_start": jnp.max(q0),
            "qplus_start": jnp.max(q0 + action_bonus(run, start_obs, n0)),
            "epsilon": linear_epsilon(step, hp.epsilon_start, hp.epsilon_end, hp.epsilon_decay_steps),
        }
        return run.replace(key=key, stats=stats.replace(chunk=ChunkStats.zeros())), metrics

    def train_chunk(state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        state, _ = jax.lax.scan(env_step, state, None, length=static.log_every)
        with jax.named_scope("metrics"):
            runs, metrics = jax.vmap(chunk_metrics, in_axes=(0, None))(state.runs, state.step)
        return TrainState(step=state.step, runs=runs), metrics

    return Trainer(
        static=static, env=env, network=network, init=init, train_chunk=train_chunk,
        q_values=q_values, head_values=head_values, count_columns=count_columns, targets=targets_for,
    )
