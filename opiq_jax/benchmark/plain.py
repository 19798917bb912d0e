"""The plain baseline: OPIQ as a straightforward vmapped, jitted DQN with count bonuses.

This is the yardstick of ``opiq-jax bench``, written the obvious way, for clarity rather than speed,
and kept apart from the compiled trainer (it imports neither the trainer nor its replay or counts):

* one jitted function ``step(state) -> state``, vmapped over runs, called from a Python for-loop:
  one dispatch per environment step;
* full observations in replay: ``(obs, cell, action, reward, terminated, done, next_obs,
  next_cell)`` per step, where ``next_obs`` is gymnax's pre-reset ``final_observation``;
* an exact dense count table ``int32[num_cells, num_actions]`` per run, indexed by the
  environment's cell id (``env.cell_id(env.compact_state(state))``), so counts are exact;
* every run keeps its own step counter, so "train now" is a per-run ``lax.cond`` inside the vmap
  (which XLA turns into a select that computes the update for every run on every step) and the
  target network is refreshed with ``jnp.where`` on every step;
* ``optax.rmsprop`` after a global-norm clip, PyTorch's RMSProp convention (eps outside the root);
* the paper's networks written with stock flax layers (``nn.Dense``, ``nn.Conv``), the same
  shapes and initialisation as the trainer's.

The algorithm is the paper's (and the trainer's): act epsilon-greedily on
``Q+(s, a) = Q(s, a) + C_action / (N(s, a) + 1)^M`` with the counts before this step's increment,
step the environment, increment ``N(s, a)``, store the step, then (once the buffer holds
``batch + 1`` steps) do one update on ``batch`` windows of ``n`` consecutive steps with target

    y = sum_{k < L} gamma^k (r_k + beta / sqrt(N(s_k, a_k)))
        + gamma^L (1 - terminal) max_a' [Q_target(s_L, a') + C_bootstrap / (N(s_L, a') + 1)^M]

where the window stops at the end of its episode (``L <= n``), counts are read at training time,
and a truncated episode bootstraps from its last real observation. Settings come from the same
:class:`~opiq_jax.common.config.StaticConfig` and the hyperparameter dict as the trainer
(``count_features``, the sketch and ``log_every`` are ignored: counts here are always exact; so is
``precision``: the baseline is always float32).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from ..common.config import HParams, StaticConfig, make_hparams, stack_hparams
from ..registry.environments import environment_spec, started_by_host
from ..registry.methods import get_method, method_hparams
from ..runs.memory import tree_bytes


class MLP(nn.Module):
    """The chain network: ReLU hidden layers, then one output per action (layer ``head``)."""

    num_outputs: int
    hidden: tuple[int, ...] = (256, 256)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.reshape((obs.shape[0], -1))
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.num_outputs, name="head")(x)


class MazeConv(nn.Module):
    """The maze network: two 3x3 stride-2 VALID convolutions of 16, FC 400 (ReLU), FC 200, head."""

    num_outputs: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = nn.relu(nn.Conv(16, (3, 3), strides=(2, 2), padding="VALID")(obs))
        x = nn.relu(nn.Conv(16, (3, 3), strides=(2, 2), padding="VALID")(x))
        x = nn.relu(nn.Dense(400)(x.reshape((x.shape[0], -1))))
        x = nn.Dense(200)(x)
        return nn.Dense(self.num_outputs, name="head")(x)


def make_network(static: StaticConfig, num_actions: int) -> nn.Module:
    """The paper's network for ``static.network`` (``mlp`` or ``maze_conv``)."""
    if static.network == "mlp":
        return MLP(num_outputs=num_actions, hidden=tuple(static.hidden))
    if static.network == "maze_conv":
        return MazeConv(num_outputs=num_actions)
    raise ValueError(f"the plain baseline has no {static.network!r} network: use mlp or maze_conv")


def init_params(network: nn.Module, key: jax.Array, obs: jax.Array, final_bias: jax.Array) -> Any:
    """Initialises ``network`` on one observation and fills the output bias with ``final_bias``."""
    params = network.init(key, obs[None])
    head = params["params"]["head"]
    head = {**head, "bias": jnp.full_like(head["bias"], final_bias)}
    return {"params": {**params["params"], "head": head}}


@struct.dataclass
class PlainReplay:
    """A ring of full transitions; every array has a leading ``capacity`` axis."""

    obs: jax.Array  # float32[capacity, *obs_shape]
    cell: jax.Array  # int32[capacity]: cell id of obs
    action: jax.Array  # int32[capacity]
    reward: jax.Array  # float32[capacity]: environment reward minus hparams.reward_subtract
    terminated: jax.Array  # bool[capacity]: next_obs is a true terminal
    done: jax.Array  # bool[capacity]: the episode ended at this step (terminated or truncated)
    next_obs: jax.Array  # float32[capacity, *obs_shape]: the observation after the step, before any reset
    next_cell: jax.Array  # int32[capacity]
    position: jax.Array  # int32: where the next transition goes
    size: jax.Array  # int32: transitions stored (<= capacity)


@struct.dataclass
class PlainRun:
    """Everything one run owns. ``make_plain(...).init`` stacks it along a leading runs axis."""

    step: jax.Array  # int32: environment steps taken by this run
    key: jax.Array
    hparams: HParams
    params: Any
    target_params: Any
    opt_state: Any
    env_params: Any
    env_state: Any
    obs: jax.Array
    counts: jax.Array  # int32[num_cells, num_actions]: exact visit counts N(s, a)
    replay: PlainReplay
    episode_return: jax.Array  # float32: return of the running episode so far
    last_return: jax.Array  # float32: return of the last finished episode (NaN before the first)
    max_return: jax.Array  # float32: best finished episode return (NaN before the first)
    episodes: jax.Array  # int32: finished episodes
    loss: jax.Array  # float32: TD loss of the last update (NaN before the first)
    updates: jax.Array  # int32: updates applied


@dataclasses.dataclass(frozen=True)
class Plain:
    """The plain baseline's functions for one configuration.

    ``init(run_keys, env_keys, hparams)`` and ``step(state)`` are jitted (``step`` donates its
    argument, as any JAX RL loop does, so that replay is updated in place); ``run_step`` and
    ``learn`` are the unjitted single-run functions they are built from.
    """

    static: StaticConfig
    env: Any
    network: Any
    init: Callable[[jax.Array, jax.Array, HParams], PlainRun]
    step: Callable[[PlainRun], PlainRun]
    run_step: Callable[[PlainRun], PlainRun]
    learn: Callable[[PlainRun, jax.Array], tuple[Any, Any, jax.Array]]


def make_env(static: StaticConfig):
    """The environment named by ``static.env``, built as the registry builds it (one stepped in the program)."""
    if started_by_host(static.env):
        raise ValueError(f"the plain baseline steps environments in the program, not {static.env!r} (a pool)")
    return environment_spec(static.env).make(static)


def make_optimiser(static: StaticConfig, lr: jax.Array) -> optax.GradientTransformation:
    """Global-norm clip then ``optax.rmsprop`` with PyTorch's conventions (eps outside the root)."""
    return optax.chain(
        optax.clip_by_global_norm(static.grad_clip),
        optax.rmsprop(lr, decay=static.rms_decay, eps=static.rms_eps, eps_in_sqrt=False),
    )


def epsilon_at(step: jax.Array, hp: HParams) -> jax.Array:
    """Linear epsilon schedule from ``epsilon_start`` to ``epsilon_end``; decay 0 means fixed end."""
    fraction = jnp.where(
        hp["epsilon_decay_steps"] > 0, jnp.clip(step / jnp.maximum(hp["epsilon_decay_steps"], 1.0), 0.0, 1.0), 1.0
    )
    return hp["epsilon_start"] + (hp["epsilon_end"] - hp["epsilon_start"]) * fraction


def count_bonus(counts: jax.Array, scale: jax.Array, exponent: jax.Array) -> jax.Array:
    """OPIQ's optimism term ``scale / (N + 1)^exponent``."""
    return scale / (counts.astype(jnp.float32) + 1.0) ** exponent


def empty_replay(obs: jax.Array, capacity: int) -> PlainReplay:
    """A replay ring of ``capacity`` zeroed transitions shaped like ``obs``."""
    return PlainReplay(
        obs=jnp.zeros((capacity, *obs.shape), jnp.float32),
        cell=jnp.zeros((capacity,), jnp.int32),
        action=jnp.zeros((capacity,), jnp.int32),
        reward=jnp.zeros((capacity,), jnp.float32),
        terminated=jnp.zeros((capacity,), bool),
        done=jnp.zeros((capacity,), bool),
        next_obs=jnp.zeros((capacity, *obs.shape), jnp.float32),
        next_cell=jnp.zeros((capacity,), jnp.int32),
        position=jnp.int32(0),
        size=jnp.int32(0),
    )


def replay_add(replay: PlainReplay, **transition: jax.Array) -> PlainReplay:
    """Writes one transition at ``position``, overwriting the oldest once the ring is full."""
    capacity = replay.obs.shape[0]
    written = {name: getattr(replay, name).at[replay.position].set(value) for name, value in transition.items()}
    return replay.replace(
        **written, position=(replay.position + 1) % capacity, size=jnp.minimum(replay.size + 1, capacity)
    )


def init_run(static: StaticConfig, env: Any, network: Any, run_key: jax.Array, env_key: jax.Array,
             hp: HParams) -> PlainRun:
    """One run's initial state: its environment, network, optimiser, counts and empty replay."""
    k_net, k_reset, k_loop = jax.random.split(run_key, 3)
    env_params = env.sample_params(env_key)
    obs, env_state = env.reset(k_reset, env_params)
    params = init_params(network, k_net, obs, hp["final_bias"])
    nan = jnp.float32(jnp.nan)
    return PlainRun(
        step=jnp.int32(0), key=k_loop, hparams=hp, params=params, target_params=params,
        opt_state=make_optimiser(static, hp["lr"]).init(params), env_params=env_params, env_state=env_state,
        obs=obs, counts=jnp.zeros((env.num_cells, env.num_actions), jnp.int32),
        replay=empty_replay(obs, static.buffer_size), episode_return=jnp.float32(0), last_return=nan,
        max_return=nan, episodes=jnp.int32(0), loss=nan, updates=jnp.int32(0),
    )


def ring_positions(replay: Any, ages: jax.Array) -> jax.Array:
    """The ring positions of the stored transitions of ``ages`` (0 the oldest, ``size - 1`` the newest) in a replay
    ring with ``position``, ``size`` and a leading ``capacity`` axis on ``obs`` (this module's and
    :mod:`.plain_atari`'s)."""
    capacity = replay.obs.shape[0]
    oldest = (replay.position - replay.size) % capacity
    return (oldest + ages) % capacity


def sample_ages(replay: Any, key: jax.Array, batch: int) -> jax.Array:
    """int32[batch]: ages of uniformly drawn stored transitions, 0 the oldest, ``size - 1`` the newest."""
    return jax.random.randint(key, (batch,), 0, jnp.maximum(replay.size, 1))


def intrinsic_reward(visits: jax.Array, beta: jax.Array) -> jax.Array:
    """The pseudocount bonus ``beta / sqrt(N)`` (a stored transition was counted, so ``N >= 1``: the floor only
    guards the division)."""
    return beta / jnp.sqrt(jnp.maximum(visits, 1).astype(jnp.float32))


def n_step_window(replay: Any, counted: jax.Array, counts: jax.Array, ages: jax.Array, n_step: int,
                  gamma: float, beta: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Walks the ``n_step`` transitions of each window from ``ages``, summing rewards plus ``beta / sqrt(N(s, a))``
    until the episode ends. ``counted``: int32[capacity], each stored transition's row of ``counts`` (a cell id
    here, a hashed frame slot in :mod:`.plain_atari`).

    Returns the discounted sum, the ring position whose ``next_obs`` the window bootstraps from, and the bootstrap's
    discount (``gamma^L``, 0 after a terminal).
    """
    batch = ages.shape[0]
    n_step_return = jnp.zeros((batch,), jnp.float32)
    discount = jnp.ones((batch,), jnp.float32)
    alive = jnp.ones((batch,), bool)
    boot_position = jnp.zeros((batch,), jnp.int32)
    boot_discount = jnp.zeros((batch,), jnp.float32)
    for k in range(n_step):
        position = ring_positions(replay, ages + k)
        use = alive & (ages + k < replay.size)  # never past the newest transition
        bonus = intrinsic_reward(counts[counted[position], replay.action[position]], beta)
        n_step_return = n_step_return + jnp.where(use, discount * (replay.reward[position] + bonus), 0.0)
        discount = discount * gamma
        boot_position = jnp.where(use, position, boot_position)
        boot_discount = jnp.where(use, discount * (1.0 - replay.terminated[position]), boot_discount)
        alive = use & ~replay.done[position]
    return n_step_return, boot_position, boot_discount


def n_step_targets(network: Any, run: Any, ages: jax.Array, n_step: int, gamma: float, counted: jax.Array,
                   next_counted: jax.Array) -> jax.Array:
    """float32[batch]: the n-step targets of the windows starting at ``ages`` (module docstring), bootstrapped from
    the target network's Q+ at the window's last next observation. ``counted`` and ``next_counted``: int32[capacity],
    the count-table rows of each stored transition's observation and of its next one."""
    hp, replay = run.hparams, run.replay
    n_step_return, boot, boot_discount = n_step_window(replay, counted, run.counts, ages, n_step, gamma, hp["beta"])
    q_next = network.apply(run.target_params, replay.next_obs[boot])
    bonus_next = count_bonus(run.counts[next_counted[boot]], hp["c_bootstrap"], hp["m"])
    return n_step_return + boot_discount * jnp.max(q_next + bonus_next, axis=-1)


def td_targets(static: StaticConfig, network: Any, run: PlainRun, ages: jax.Array) -> jax.Array:
    """float32[batch]: :func:`n_step_targets` with the counts of the exact cells of each observation."""
    return n_step_targets(network, run, ages, static.n_step, static.gamma, run.replay.cell, run.replay.next_cell)


def update_on_windows(static: StaticConfig, network: Any, run: Any, key: jax.Array,
                      targets_of: Callable[[StaticConfig, Any, Any, jax.Array], jax.Array],
                      ) -> tuple[Any, Any, jax.Array]:
    """One RMSProp step on ``batch`` uniformly drawn windows of ``n`` consecutive transitions, with targets from
    ``targets_of(static, network, run, ages)``: the new parameters, optimiser state and TD loss (the mean squared
    error, as the paper). This module's runs and :mod:`.plain_atari`'s alike."""
    ages = sample_ages(run.replay, key, static.batch_size)
    targets = jax.lax.stop_gradient(targets_of(static, network, run, ages))
    first = ring_positions(run.replay, ages)
    obs, actions = run.replay.obs[first], run.replay.action[first]

    def loss_fn(params):
        q_taken = jnp.take_along_axis(network.apply(params, obs), actions[:, None], axis=1)[:, 0]
        return jnp.mean((q_taken - targets) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(run.params)
    updates, opt_state = make_optimiser(static, run.hparams["lr"]).update(grads, run.opt_state, run.params)
    return optax.apply_updates(run.params, updates), opt_state, loss


def learn(static: StaticConfig, network: Any, run: PlainRun, key: jax.Array) -> tuple[Any, Any, jax.Array]:
    """One update on the chain's or the maze's runs: the new parameters, optimiser state and TD loss."""
    return update_on_windows(static, network, run, key, td_targets)


def run_step(static: StaticConfig, env: Any, network: Any, run: PlainRun) -> PlainRun:
    """One environment step of one run: act, step, count, store, maybe train, refresh target."""
    hp, num_actions = run.hparams, env.num_actions
    key, k_explore, k_random, k_env, k_learn = jax.random.split(run.key, 5)

    cell = env.cell_id(env.compact_state(run.env_state))
    q = network.apply(run.params, run.obs[None])[0]
    q_plus = q + count_bonus(run.counts[cell], hp["c_action"], hp["m"])
    explore = jax.random.uniform(k_explore) < epsilon_at(run.step, hp)
    action = jnp.where(explore, jax.random.randint(k_random, (), 0, num_actions), jnp.argmax(q_plus))
    action = action.astype(jnp.int32)

    obs, env_state, reward, terminated, truncated, info = env.step(k_env, run.env_state, action, run.env_params)
    done = terminated | truncated
    replay = replay_add(
        run.replay, obs=run.obs, cell=cell, action=action, reward=reward - hp["reward_subtract"],
        terminated=terminated, done=done, next_obs=info["final_observation"], next_cell=info["cell_id"],
    )
    episode_return = run.episode_return + reward
    run = run.replace(
        step=run.step + 1, key=key, env_state=env_state, obs=obs, replay=replay,
        counts=run.counts.at[cell, action].add(1),
        episode_return=jnp.where(done, 0.0, episode_return),
        last_return=jnp.where(done, episode_return, run.last_return),
        max_return=jnp.where(done, jnp.fmax(run.max_return, episode_return), run.max_return),
        episodes=run.episodes + done.astype(jnp.int32),
    )

    def skip(run: PlainRun, key: jax.Array) -> tuple[Any, Any, jax.Array]:
        del key
        return run.params, run.opt_state, run.loss

    train_now = (run.step >= static.batch_size + 1) & (run.step % static.train_every == 0)
    params, opt_state, loss = jax.lax.cond(train_now, functools.partial(learn, static, network), skip, run, k_learn)
    copy_now = run.step % static.target_update == 0
    target = jax.tree.map(lambda t, p: jnp.where(copy_now, p, t), run.target_params, params)
    return run.replace(
        params=params, opt_state=opt_state, loss=loss, updates=run.updates + train_now.astype(jnp.int32),
        target_params=target,
    )


def make_plain(static: StaticConfig, env: Any | None = None) -> Plain:
    """The plain baseline for ``static`` (the same settings object the trainer takes)."""
    static.validate()
    env = make_env(static) if env is None else env
    network = make_network(static, env.num_actions)

    def init(run_keys: jax.Array, env_keys: jax.Array, hparams: HParams) -> PlainRun:
        chex.assert_equal_shape([run_keys, env_keys])
        chex.assert_tree_shape_prefix(hparams, run_keys.shape[:1])
        return jax.vmap(functools.partial(init_run, static, env, network))(run_keys, env_keys, hparams)

    one_step = functools.partial(run_step, static, env, network)
    return Plain(
        static=static, env=env, network=network, init=jax.jit(init),
        step=jax.jit(jax.vmap(one_step), donate_argnums=0), run_step=one_step,
        learn=functools.partial(learn, static, network),
    )


def _one_run_shapes(static: StaticConfig) -> PlainRun:
    """Shapes and dtypes of a one-run plain state (nothing is allocated)."""
    plain = make_plain(static)
    keys = jax.random.split(jax.random.key(0), 1)
    opiq = get_method("opiq")
    hparams = make_hparams(opiq.options(), method_hparams(static.env, "opiq"))
    return jax.eval_shape(plain.init, keys, keys, stack_hparams([hparams]))


def plain_state_bytes_per_run(static: StaticConfig) -> int:
    """Device bytes of one run of the plain baseline, from the shapes alone."""
    return tree_bytes(_one_run_shapes(static))


def plain_replay_item_bytes(static: StaticConfig) -> int:
    """Bytes of one stored transition of the plain baseline (full observations)."""
    replay = _one_run_shapes(static).replay
    return tree_bytes(replay.replace(position=jnp.zeros((0,)), size=jnp.zeros((0,)))) // static.buffer_size


def run_plain(plain: Plain, state: PlainRun, steps: int) -> PlainRun:
    """Calls ``plain.step`` ``steps`` times from Python: one dispatch per environment step."""
    for _ in range(steps):
        state = plain.step(state)
    return state
