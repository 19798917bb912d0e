"""The plain baseline on Montezuma's Revenge: a straightforward JAX DQN with counts around one EnvPool pool.

What a user would write instead of this project's pool path, in the style of :mod:`.plain` (whose optimiser,
epsilon schedule, optimism term, parameter initialisation, replay sampling and n-step walk it reuses), written for
clarity rather than speed and kept apart from the trainer (it imports neither the trainer nor its paths, replay or
count sketch):

* one EnvPool pool of Montezuma's Revenge with the paper's settings (``MontezumaPool``: sticky actions, frame
  skip 4, stacks of four 84x84 greyscale frames, 18 actions, a 4,500-step cap), one environment per run, stepped
  through EnvPool's XLA interface inside one jitted function ``step(state) -> state`` that a Python for-loop calls:
  one dispatch per environment step. A pool cannot be vmapped, so acting, recording and learning are vmapped
  over runs and the pool's step sits between them;
* the Nature DQN network written with stock flax layers (``nn.Conv``, ``nn.Dense``), the shapes and
  initialisation of the trainer's, reading EnvPool's ``[4, 84, 84]`` stacks as they come;
* a hashed count table ``int32[count_slots, num_actions]`` per run: the paper's frame feature (the newest frame
  area-downsampled to 8 x 11 pixels of 8 levels, :func:`opiq_jax.primitives.counts.montezuma_feature`: what is
  counted is the paper's, so both columns of the table count the same thing) hashed to one slot by a fixed random linear
  hash; two features that share a slot share a count (no dictionary, no sketch);
* a uniform replay ring of full transitions on the device, ``(obs, slot, action, reward, terminated, done,
  next_obs, next_slot)`` with both uint8 stacks stored whole (no sharing of the frames that consecutive stacks
  have in common): 56 KB per transition;
* EnvPool's reset step (the step after an episode ends, which ignores the action) is no transition: it is
  neither stored nor counted;
* the pool steps every run at once, so one step counter serves all runs, and "train now" (every
  ``train_every`` steps once ``batch_size + 1`` steps were taken) and "copy the target network" (every
  ``target_update`` steps) are ``lax.cond`` on that scalar: the update runs only when due (:mod:`.plain`'s runs
  each keep a counter, which turns its conds into selects);
* step, store, then train: the emulators do not step while the agent learns.

The algorithm is :mod:`.plain`'s (OPIQ): act epsilon-greedily on ``Q+(s, a) = Q(s, a) + C_action / (N(s, a) +
1)^M`` with the counts before this step's increment, step, increment ``N(s, a)``, store, and when due do one
RMSProp step on ``batch`` windows of ``n`` consecutive transitions drawn uniformly with target

    y = sum_{k < L} gamma^k (r_k + beta / sqrt(N(s_k, a_k)))
        + gamma^L (1 - terminal) max_a' [Q_target(s_L, a') + C_bootstrap / (N(s_L, a') + 1)^M]

where the window stops at its episode's end (``L <= n``), counts are read at training time, a truncated
episode bootstraps from its last frame, and ``r`` is the game's reward clipped to [-1, 1] less
``reward_subtract``. Settings come from the trainer's :class:`~opiq_jax.common.config.StaticConfig` for Montezuma and
OPIQ's hyperparameters; not here: the mixed Monte Carlo return of the paper's Montezuma runs (``beta_mmc`` is
ignored, as in ``experiments/bench/torch_loop.py``), ``envs_per_run`` (one environment per run), ``overlap``,
``precision`` (always float32) and the sketch's settings (``count_slots`` instead).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ..common.config import HParams, StaticConfig
from ..envs.atari import StepOutput, clip_reward, newest_frame
from ..primitives.counts import montezuma_feature
from ..runs.memory import tree_bytes
from .plain import count_bonus, epsilon_at, init_params, make_optimiser, n_step_targets, update_on_windows

COUNT_SLOTS = 1 << 16
"""Slots of each run's count table: per action, the memory of the trainer's default sketch (4 rows of 2^14)."""

STACK_SHAPE = (4, 84, 84)
"""EnvPool's frame stack with the paper's settings: four 84x84 greyscale frames, oldest first."""

HASH_MULTIPLIERS = (np.random.default_rng(0).integers(0, 2**32, size=8 * 11, dtype=np.uint64) | 1).astype(np.uint32)
"""One fixed odd multiplier per pixel of the 8 x 11 feature: the hash is their sum weighted by the levels, mod 2^32."""


class NatureConv(nn.Module):
    """The Nature DQN network on EnvPool's stacks ``uint8[B, 4, 84, 84]``: 32 8x8/4, 64 4x4/2 and 64 3x3/1 VALID
    convolutions, FC 512 (all ReLU), then one output per action (layer ``head``)."""

    num_outputs: int

    @nn.compact
    def __call__(self, stacks: jax.Array) -> jax.Array:
        x = jnp.moveaxis(stacks, 1, -1).astype(jnp.float32) / 255.0  # flax convolves channels-last
        x = nn.relu(nn.Conv(32, (8, 8), strides=(4, 4), padding="VALID")(x))
        x = nn.relu(nn.Conv(64, (4, 4), strides=(2, 2), padding="VALID")(x))
        x = nn.relu(nn.Conv(64, (3, 3), strides=(1, 1), padding="VALID")(x))
        x = nn.relu(nn.Dense(512)(x.reshape((x.shape[0], -1))))
        return nn.Dense(self.num_outputs, name="head")(x)


@struct.dataclass
class FrameTransitions:
    """A ring of full transitions; every array has a leading ``capacity`` axis."""

    obs: jax.Array  # uint8[capacity, 4, 84, 84]: the stack acted on
    slot: jax.Array  # int32[capacity]: the count slot of obs's newest frame
    action: jax.Array  # int32[capacity]
    reward: jax.Array  # float32[capacity]: the clipped game reward minus hparams.reward_subtract
    terminated: jax.Array  # bool[capacity]: the game ended (no bootstrap)
    done: jax.Array  # bool[capacity]: the episode ended here (terminated or truncated)
    next_obs: jax.Array  # uint8[capacity, 4, 84, 84]: the stack the step led to
    next_slot: jax.Array  # int32[capacity]
    position: jax.Array  # int32: where the next transition goes
    size: jax.Array  # int32: transitions stored (<= capacity)


@struct.dataclass
class PlainAtariRun:
    """Everything one run owns. ``make_plain_atari(...).init`` stacks it along a leading runs axis."""

    key: jax.Array
    hparams: HParams
    params: Any
    target_params: Any
    opt_state: Any
    obs: jax.Array  # uint8[4, 84, 84]: the stack to act on
    counts: jax.Array  # int32[count_slots, num_actions]: N(s, a) by hashed frame feature
    replay: FrameTransitions
    episode_return: jax.Array  # float32: unclipped return of the running episode so far
    last_return: jax.Array  # float32: return of the last finished episode (NaN before the first)
    max_return: jax.Array  # float32: best finished episode return (NaN before the first)
    episodes: jax.Array  # int32: finished episodes
    loss: jax.Array  # float32: TD loss of the last update (NaN before the first)
    updates: jax.Array  # int32: updates applied


@struct.dataclass
class PlainAtariState:
    """The runs and what they share: the pool's XLA handle and the step counter (the pool steps all runs at once)."""

    step: jax.Array  # int32: environment steps taken by every run
    handle: Any  # the pool's XLA handle, threaded from one pool step to the next
    runs: PlainAtariRun


@dataclasses.dataclass(frozen=True)
class PlainAtari:
    """The plain Atari baseline's functions for one configuration and pool.

    ``init(run_keys, hparams, start)`` (``start``: what ``pool.reset()`` returned) and ``step(state)`` are jitted
    (``step`` donates its argument, so that the replay is updated in place); ``act``, ``record`` and ``learn`` are
    the unjitted single-run functions ``step`` is built from.
    """

    static: StaticConfig
    pool: Any
    network: NatureConv
    count_slots: int
    init: Callable[[jax.Array, HParams, tuple[Any, StepOutput]], PlainAtariState]
    step: Callable[[PlainAtariState], PlainAtariState]
    act: Callable[[jax.Array, PlainAtariRun], tuple[PlainAtariRun, jax.Array, jax.Array]]
    record: Callable[[PlainAtariRun, jax.Array, jax.Array, StepOutput], PlainAtariRun]
    learn: Callable[[PlainAtariRun, jax.Array], tuple[Any, Any, jax.Array]]


# ------------------------------------------------------------------------------------------ counting


def frame_slot(frame: jax.Array, count_slots: int) -> jax.Array:
    """int32: the count slot of one 84x84 frame, its 8 x 11 feature of 8 levels hashed (module docstring)."""
    levels = montezuma_feature(frame).reshape(-1).astype(jnp.uint32)
    code = jnp.sum(levels * jnp.asarray(HASH_MULTIPLIERS), dtype=jnp.uint32)  # wraps mod 2^32, as meant
    return (code % jnp.uint32(count_slots)).astype(jnp.int32)


# ------------------------------------------------------------------------------------------ replay


def empty_transitions(capacity: int) -> FrameTransitions:
    """A ring of ``capacity`` zeroed transitions of full uint8 stacks."""
    return FrameTransitions(
        obs=jnp.zeros((capacity, *STACK_SHAPE), jnp.uint8), slot=jnp.zeros((capacity,), jnp.int32),
        action=jnp.zeros((capacity,), jnp.int32), reward=jnp.zeros((capacity,), jnp.float32),
        terminated=jnp.zeros((capacity,), bool), done=jnp.zeros((capacity,), bool),
        next_obs=jnp.zeros((capacity, *STACK_SHAPE), jnp.uint8), next_slot=jnp.zeros((capacity,), jnp.int32),
        position=jnp.int32(0), size=jnp.int32(0),
    )


def add_transition(replay: FrameTransitions, keep: jax.Array, **transition: jax.Array) -> FrameTransitions:
    """Writes one transition at ``position`` where ``keep`` (overwriting the oldest once the ring is full);
    ``keep=False`` leaves the ring as it was. A ``where`` on the one slot rather than a ``cond`` on the ring: under
    ``vmap`` a cond whose predicate differs per run would select between two whole rings."""
    capacity = replay.obs.shape[0]

    def write(column: jax.Array, value: jax.Array) -> jax.Array:
        return column.at[replay.position].set(jnp.where(keep, value, column[replay.position]))

    written = {name: write(getattr(replay, name), value) for name, value in transition.items()}
    stored = keep.astype(jnp.int32)
    return replay.replace(**written, position=(replay.position + stored) % capacity,
                          size=jnp.minimum(replay.size + stored, capacity))


# ------------------------------------------------------------------------------------------ learning


def td_targets(static: StaticConfig, network: NatureConv, run: PlainAtariRun, ages: jax.Array) -> jax.Array:
    """float32[batch]: :func:`~.plain.n_step_targets` with the counts of each stack's hashed frame feature."""
    return n_step_targets(network, run, ages, static.n_step, static.gamma, run.replay.slot, run.replay.next_slot)


def learn(static: StaticConfig, network: NatureConv, run: PlainAtariRun, key: jax.Array
          ) -> tuple[Any, Any, jax.Array]:
    """One update on uniformly drawn windows: the new parameters, optimiser state and TD loss."""
    return update_on_windows(static, network, run, key, td_targets)


def learner_after_update(static: StaticConfig, network: NatureConv, run: PlainAtariRun) -> tuple[Any, ...]:
    """What one update (:func:`learn`) changes: the run's key, parameters, optimiser state and loss."""
    key, k_learn = jax.random.split(run.key)
    return (key, *learn(static, network, run, k_learn))


def learner_as_is(run: PlainAtariRun) -> tuple[Any, ...]:
    """:func:`learner_after_update`'s outputs without an update."""
    return run.key, run.params, run.opt_state, run.loss


def train_and_copy_when_due(static: StaticConfig, network: NatureConv, runs: PlainAtariRun, step: jax.Array
                            ) -> PlainAtariRun:
    """Every run's update when one is due after ``step`` steps, then the target copy when due. The conds return only
    what they change (as :mod:`.plain`'s), so the replay is never an output of a branch."""
    train_now = (step >= static.batch_size + 1) & (step % static.train_every == 0)
    key, params, opt_state, loss = jax.lax.cond(
        train_now, jax.vmap(functools.partial(learner_after_update, static, network)), jax.vmap(learner_as_is), runs)
    target = jax.lax.cond(step % static.target_update == 0, lambda: params, lambda: runs.target_params)
    return runs.replace(key=key, params=params, opt_state=opt_state, loss=loss, target_params=target,
                        updates=runs.updates + train_now.astype(jnp.int32))


# ------------------------------------------------------------------------------------------ acting and recording


def init_run(static: StaticConfig, network: NatureConv, count_slots: int, num_actions: int, run_key: jax.Array,
             hp: HParams, obs: jax.Array) -> PlainAtariRun:
    """One run's initial state from its first stack: network, optimiser, counts and an empty replay."""
    k_net, k_loop = jax.random.split(run_key)
    params = init_params(network, k_net, obs, hp["final_bias"])
    nan = jnp.float32(jnp.nan)
    return PlainAtariRun(
        key=k_loop, hparams=hp, params=params, target_params=params,
        opt_state=make_optimiser(static, hp["lr"]).init(params), obs=jnp.asarray(obs, jnp.uint8),
        counts=jnp.zeros((count_slots, num_actions), jnp.int32), replay=empty_transitions(static.buffer_size),
        episode_return=jnp.float32(0), last_return=nan, max_return=nan, episodes=jnp.int32(0), loss=nan,
        updates=jnp.int32(0),
    )


def act(network: NatureConv, step: jax.Array, run: PlainAtariRun) -> tuple[PlainAtariRun, jax.Array, jax.Array]:
    """Epsilon-greedy on Q+ with the counts before this step: the run (its key moved on), the action and the count
    slot of the stack acted on."""
    hp, (count_slots, num_actions) = run.hparams, run.counts.shape
    key, k_explore, k_random = jax.random.split(run.key, 3)
    slot = frame_slot(newest_frame(run.obs), count_slots)
    q = network.apply(run.params, run.obs[None])[0]
    q_plus = q + count_bonus(run.counts[slot], hp["c_action"], hp["m"])
    explore = jax.random.uniform(k_explore) < epsilon_at(step, hp)
    action = jnp.where(explore, jax.random.randint(k_random, (), 0, num_actions), jnp.argmax(q_plus))
    return run.replace(key=key), action.astype(jnp.int32), slot


def record(run: PlainAtariRun, slot: jax.Array, action: jax.Array, out: StepOutput) -> PlainAtariRun:
    """Counts and stores the step that led from ``run.obs`` to ``out.obs`` (unless it was EnvPool's reset step) and
    keeps the episode statistics."""
    chex.assert_equal_shape([run.obs, out.obs])
    real = ~out.first  # EnvPool's reset step ignored the action: no transition led here
    done = out.terminated | out.truncated
    replay = add_transition(
        run.replay, real, obs=run.obs, slot=slot, action=action,
        reward=clip_reward(out.reward) - run.hparams["reward_subtract"], terminated=out.terminated, done=done,
        next_obs=out.obs, next_slot=frame_slot(newest_frame(out.obs), run.counts.shape[0]),
    )
    episode_return = run.episode_return + out.reward
    return run.replace(
        obs=out.obs, replay=replay, counts=run.counts.at[slot, action].add(real.astype(jnp.int32)),
        episode_return=jnp.where(done, 0.0, episode_return),
        last_return=jnp.where(done, episode_return, run.last_return),
        max_return=jnp.where(done, jnp.fmax(run.max_return, episode_return), run.max_return),
        episodes=run.episodes + done.astype(jnp.int32),
    )


def pool_step(static: StaticConfig, pool: Any, network: NatureConv, state: PlainAtariState) -> PlainAtariState:
    """One environment step of every run: act, step the pool, count and store, then train and copy when due."""
    runs, actions, slots = jax.vmap(functools.partial(act, network), in_axes=(None, 0))(state.step, state.runs)
    handle, out = pool.step(state.handle, actions)
    runs = jax.vmap(record)(runs, slots, actions, out)
    step = state.step + 1
    return PlainAtariState(step=step, handle=handle, runs=train_and_copy_when_due(static, network, runs, step))


def make_plain_atari(static: StaticConfig, pool: Any, count_slots: int = COUNT_SLOTS) -> PlainAtari:
    """The plain baseline for ``static`` (Montezuma's settings) on ``pool``: one run per pool environment."""
    static.validate()
    if tuple(pool.obs_shape) != STACK_SHAPE:
        raise ValueError(f"the plain Atari baseline needs EnvPool's {STACK_SHAPE} stacks, got {pool.obs_shape}")
    if count_slots < 1:
        raise ValueError(f"count_slots must be positive, got {count_slots}")
    network = NatureConv(num_outputs=int(pool.num_actions))

    def init(run_keys: jax.Array, hparams: HParams, start: tuple[Any, StepOutput]) -> PlainAtariState:
        handle, first = start
        chex.assert_shape(run_keys, (pool.num_envs,))
        chex.assert_shape(first.obs, (pool.num_envs, *STACK_SHAPE))
        chex.assert_tree_shape_prefix(hparams, (pool.num_envs,))
        one = functools.partial(init_run, static, network, count_slots, int(pool.num_actions))
        return PlainAtariState(step=jnp.int32(0), handle=handle, runs=jax.vmap(one)(run_keys, hparams, first.obs))

    return PlainAtari(
        static=static, pool=pool, network=network, count_slots=count_slots, init=jax.jit(init),
        step=jax.jit(functools.partial(pool_step, static, pool, network), donate_argnums=0),
        act=functools.partial(act, network), record=record, learn=functools.partial(learn, static, network),
    )


def run_plain_atari(plain: PlainAtari, state: PlainAtariState, steps: int) -> PlainAtariState:
    """Calls ``plain.step`` ``steps`` times from Python: one dispatch per environment step."""
    for _ in range(steps):
        state = plain.step(state)
    return state


def state_bytes_per_run(state: PlainAtariState) -> int:
    """Device bytes of one run of ``state`` (its replay, counts, networks and optimiser)."""
    return tree_bytes(state.runs) // int(state.runs.obs.shape[0])


__all__ = ["COUNT_SLOTS", "FrameTransitions", "NatureConv", "PlainAtari", "PlainAtariRun", "PlainAtariState",
           "frame_slot", "make_plain_atari", "run_plain_atari", "state_bytes_per_run"]
