"""The pool stepping: one EnvPool pool holds every run's emulators (any Atari game), replay of single frames.

What a game's frames mean to the agent comes with its environment's spec, as :class:`FrameFeatures` (what is
counted, the reward learned from, whether there are rooms); this module names no game.

* The pool holds ``envs_per_run`` environments per run (one by default, as the paper's agent), reshaped
  between the pool's ``[runs * envs]`` and ``[runs, envs]``. It is stepped through EnvPool's XLA
  interface *inside* the compiled ``lax.scan``: a pool cannot be vmapped, so acting and recording are
  vmapped over runs and the pool step sits between them, its handle in ``TrainState.env``.
* The replay stores single uint8 frames (:mod:`opiq_jax.primitives.frame_replay`), one ring per environment
  (``buffer_size`` frames per run in all, split evenly; a minibatch draws an equal share from each ring),
  with 4-frame stacks rebuilt at sampling, never across an episode. EnvPool's reset step is stored as a
  ``first`` slot, so it is never a transition, never in an n-step window and never counted.
* Counts are over a code of the newest frame (``FrameFeatures.count_code``; for every Atari game the paper's
  Montezuma feature, 8x11 pixels of 8 levels, ``counts.montezuma_code``).
* Training rewards are the spec's (``FrameFeatures.train_reward``: clipped to [-1, 1] for Atari), then
  R-Subtract's constant is subtracted; episode returns are reported unclipped. Where the game has rooms
  (``FrameFeatures.num_rooms`` > 0: Montezuma's, RAM byte 3) ``rooms_visited`` counts the distinct rooms seen;
  elsewhere there is no such metric.
* The mixed Monte Carlo target: when an episode ends, each of its stored transitions gets its
  discounted clipped extrinsic return (``frame_replay.fill_episode_returns``, under a ``lax.cond`` taken
  only on steps where some run's episode ended), and the target is ``(1 - beta_mmc) y + beta_mmc G``
  with ``G = 0`` while the episode is unfinished (``StaticConfig.mmc_unfinished``). Each environment keeps
  how many transitions its running episode has stored (``PoolEnv.episode_steps``), which tells a sampled
  transition whose return is still unknown (``Batch.mc_known``).
* Diagnostics: the runs record the trainer's learning diagnostics, and a :class:`~opiq_jax.primitives.counts.CountProbe`
  of exact counts of the first codes to claim its slots, against which the sketch's over-counting is reported.
* Resuming: the emulators' state lives in EnvPool, outside JAX, so a resumed run starts fresh
  episodes (:meth:`PoolStepping.restart`): the agent, its replay, counts and parts are restored exactly, the
  interrupted episodes end where they were cut (their steps stay in the replay; a ``first`` slot keeps
  windows from crossing into the new episode, and their Monte Carlo returns stay 0, as for any
  unfinished episode), and ``env_restarts`` counts the restarts in the metrics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from . import Batch, Counting, Decision, Stepping, Outcome, Replay
from ..common.config import StaticConfig
from ..envs.atari import StepOutput, clip_reward, newest_frame
from ..primitives import counts, frame_replay
from .learned import FrameLearnedCounting
from .sketch import SketchCounting

NUM_ROOMS = 256  # a room is a RAM byte's value (Montezuma has 24 rooms per level)
PROBE_SLOTS = 1024
"""Codes whose exact counts each run keeps to measure its sketch against (about 80 KB per run with 18 actions)."""


@dataclasses.dataclass(frozen=True)
class FrameFeatures:
    """What a pool environment's frames mean to the agent, declared by its environment's spec."""

    count_code: Callable[[jax.Array], jax.Array] = counts.montezuma_code
    """One frame ``uint8[84, 84]`` to the ``uint32`` code that is counted (the paper's Montezuma feature)."""
    train_reward: Callable[[jax.Array], jax.Array] = clip_reward
    """The game's rewards ``float32[...]`` as the agent learns from them (clipped to [-1, 1], as DQN on Atari)."""
    num_rooms: int = 0
    """How many values a step's ``room`` takes; 0: the game has no rooms (no ``rooms_visited`` metric)."""
    counted: str = "the newest frame at 8x11 pixels of 8 levels (the paper's Montezuma feature)"
    """What ``count_code`` is, in words (a results folder's ``config.json`` records it)."""


ATARI_FRAMES = FrameFeatures()
"""An Atari game without rooms: the paper's Montezuma feature counted, rewards clipped."""


class PoolShapes(NamedTuple):
    """A pool's shapes without emulators: what the trainer needs to shape its state (memory estimates, tests)."""

    num_actions: int = 18
    obs_shape: tuple[int, ...] = (4, 84, 84)
    max_episode_steps: int = 4500


@struct.dataclass
class PoolEnv:
    """One run's view of the pool: its environments' current stacks and the first one (for ``q_start``)."""

    obs: jax.Array  # uint8[E, 4, 84, 84]: the current stacks (EnvPool's layout, oldest frame first)
    start_obs: jax.Array  # uint8[4, 84, 84]: the run's first stack (every episode starts there)
    restarts: jax.Array  # int32: resumes that restarted the emulators
    episode_steps: jax.Array  # int32[E]: transitions stored of each environment's running episode (returns unknown)


def to_network_input(stack: jax.Array) -> jax.Array:
    """EnvPool's ``[..., 4, 84, 84]`` stacks as the Nature network's ``[..., 84, 84, 4]``."""
    return jnp.moveaxis(stack, -3, -1)


class PoolStepping(Stepping):
    """EnvPool stepping and a frame replay (module docstring)."""

    started_by_host = True
    options = ("envs_per_run", "overlap")
    serves = "environments stepped through a pool of emulators (montezuma, atari:NAME)"
    has_test_episode = False
    has_cell_table = False
    metric_names = ("env_restarts",)
    records_diagnostics = True

    def __init__(self, pool: Any, static: StaticConfig, frames: FrameFeatures = ATARI_FRAMES,
                 replay: Callable[[PoolStepping], Replay] | None = None,
                 counting: Callable[[PoolStepping], Counting] | None = None):
        self.pool, self.static, self.frames = pool, static, frames
        self.visit_sizes = {"rooms_visited": frames.num_rooms} if frames.num_rooms else {}
        self.envs_per_run = self.environments_per_run(static.envs_per_run)
        self.overlaps = static.execution.overlap
        self.num_actions = int(pool.num_actions)
        stack, height, width = pool.obs_shape
        self.obs_shape = (height, width, stack)
        self.frame_shape = (height, width)
        self.episode_window = int(pool.max_episode_steps) + 1
        self.counting = (counting or self.counting_class)(self)
        self.replay = (replay or self.replay_class)(self)

    @classmethod
    def environments_per_run(cls, chosen: int) -> int:
        """The option's: the pool holds ``chosen`` environments per run."""
        return chosen

    def by_run(self, tree: Any) -> Any:
        """The pool's ``[runs * envs, ...]`` results as ``[runs, envs, ...]`` (run-major, as the pool's env ids)."""
        return jax.tree.map(lambda x: jnp.asarray(x).reshape((-1, self.envs_per_run) + x.shape[1:]), tree)

    # ------------------------------------------------------------------ environment

    def initial(self, start: tuple[jax.Array, StepOutput], num_runs: int) -> tuple[jax.Array, StepOutput]:
        """The pool's handle (shared) and each run's slice of the pool's first observations."""
        handle, first = start
        chex.assert_shape(first.obs, (num_runs * self.envs_per_run, *self.pool.obs_shape))
        return handle, self.by_run(first)

    def init_env(self, reset_key: jax.Array, env_key: jax.Array, start: StepOutput) -> PoolEnv:
        del reset_key, env_key  # the emulators were reset by the host, seeded by the experiment's seed
        return PoolEnv(obs=start.obs, start_obs=start.obs[0], restarts=jnp.int32(0),
                       episode_steps=jnp.zeros(start.first.shape, jnp.int32))

    def observations(self, env: PoolEnv) -> jax.Array:
        """``[E, 84, 84, 4]``: what the run acts on."""
        return to_network_input(env.obs)

    def count_keys(self, env: PoolEnv) -> jax.Array:
        """``[E, 84, 84]``: the newest frames, which are counted."""
        return newest_frame(env.obs)

    def outcome(self, runs: Any, out: StepOutput) -> tuple[Any, Outcome]:
        """The runs with their new stacks, and the step's outcome per run."""
        out = self.by_run(out)
        outcome = Outcome(obs=out.obs, reward=out.reward, terminated=out.terminated, truncated=out.truncated,
                          first=out.first, extra={"room": out.room})
        # an episode's transitions get their returns when it ends, at this step: none of it is unknown after
        settled = out.first | out.terminated | out.truncated
        steps = jnp.where(settled, 0, runs.env.episode_steps + 1)
        return runs.replace(env=runs.env.replace(obs=out.obs, episode_steps=steps)), outcome

    def step(self, handle: jax.Array, runs: Any, decision: Decision) -> tuple[jax.Array, Any, Outcome]:
        handle, out = self.pool.step(handle, decision.actions.reshape(-1))
        runs, outcome = self.outcome(runs, out)
        return handle, runs, outcome

    def send(self, handle: jax.Array, decision: Decision) -> jax.Array:
        """The first half of :meth:`step`: the emulators step on EnvPool's threads while the program goes on."""
        return self.pool.send(handle, decision.actions.reshape(-1))

    def receive(self, handle: jax.Array, runs: Any) -> tuple[jax.Array, Any, Outcome]:
        """The second half of :meth:`step`: waits for the emulators."""
        handle, out = self.pool.recv(handle)
        runs, outcome = self.outcome(runs, out)
        return handle, runs, outcome

    def restart(self, state: Any, pool: Any) -> Any:
        """``state`` restored from a checkpoint, continued on the fresh episodes of ``pool`` (module docstring)."""
        self.pool = pool
        handle, first = pool.reset()
        runs = jax.jit(jax.vmap(self.restart_run))(state.runs, self.by_run(first))
        return state.replace(env=handle, runs=runs)

    def restart_run(self, run: Any, start: StepOutput) -> Any:
        memory = jax.vmap(self.replay.add_first)(run.memory, start.obs)
        stats = run.stats
        visited = {name: seen.at[start.room].set(True) for name, seen in stats.visited.items()}  # rooms, if any
        stats = stats.replace(episode_return=jnp.zeros_like(stats.episode_return), visited=visited)
        # the cut episodes' returns stay 0 for good: they are not counted as unknown
        env = run.env.replace(obs=start.obs, restarts=run.env.restarts + 1,
                              episode_steps=jnp.zeros_like(run.env.episode_steps))
        return run.replace(env=env, memory=memory, stats=stats)

    def bonus_obs(self, obs: jax.Array) -> jax.Array:
        """What bonus networks (RND) read of an observation ``[..., 84, 84, 4]``: the newest frame,
        ``[..., 84, 84, 1]``."""
        return obs[..., -1:]

    # ------------------------------------------------------------------ statistics

    def initial_visits(self, env: PoolEnv, start: StepOutput) -> dict[str, jax.Array]:
        return {name: jnp.zeros((size,), bool).at[start.room].set(True) for name, size in self.visit_sizes.items()}

    def visits(self, run: Any, decision: Decision, outcome: Outcome) -> dict[str, jax.Array]:
        return {name: outcome.extra["room"] for name in self.visit_sizes}

    def start_state(self, run: Any) -> tuple[jax.Array, jax.Array]:
        """The run's first stack (every episode starts there: no random no-ops) and its newest frame."""
        return to_network_input(run.env.start_obs), newest_frame(run.env.start_obs)

    def metrics(self, run: Any) -> dict[str, jax.Array]:
        return {"env_restarts": run.env.restarts.astype(jnp.float32)}


class FrameCounting(SketchCounting):
    """Counts of the code of the newest frame (the spec's ``FrameFeatures.count_code``: the paper's Montezuma feature),
    into the sketch, with a probe of exact counts of the first codes to claim its slots, against which the sketch's
    over-counting is reported. ``count_features``: the default counts the frame feature, ``cfn`` learns a count of
    the newest frame (:class:`~opiq_jax.contracts.learned.FrameLearnedCounting`)."""

    options = ("count_features",)
    serves = "every environment (a pool: the frame feature by default, or cfn)"
    metric_names = ("sketch_overcount", "sketch_false_visits", "probe_codes")

    def __init__(self, stepping: PoolStepping):
        super().__init__(stepping.static)
        self.frames, self.frame_shape, self.counted = stepping.frames, stepping.frame_shape, stepping.frames.counted

    def init_features(self, hash_key: jax.Array, env: PoolEnv) -> None:
        del hash_key, env  # the frame feature needs nothing per run
        return None

    def columns(self, run: Any, frame: jax.Array) -> jax.Array:
        del run
        return counts.sketch_columns(self.code(frame), self.static.sketch_rows, self.static.sketch_width)

    def code(self, frame: jax.Array) -> jax.Array:
        return self.frames.count_code(frame)

    def init_probe(self, num_actions: int) -> counts.CountProbe:
        words = jax.eval_shape(self.code, jax.ShapeDtypeStruct(self.frame_shape, jnp.uint8)).shape[0]
        return counts.init_probe(PROBE_SLOTS, words, num_actions)

    def metrics(self, run: Any) -> dict[str, jax.Array]:
        probe = run.counts.probe if run.counts is not None else None
        if probe is None:
            sketch = {"overcount": jnp.nan, "false_visits": jnp.nan, "codes": jnp.float32(0)}
        else:
            sketch = counts.probe_overcount(probe, run.counts.sketch)
        return {"sketch_overcount": sketch["overcount"], "sketch_false_visits": sketch["false_visits"],
                "probe_codes": sketch["codes"]}


class FrameRingReplay(Replay):
    """One ring of single frames per environment of a run (``buffer_size`` frames per run, split evenly), stacks
    rebuilt at sampling, an equal share of each minibatch from each ring, and each episode's Monte Carlo returns
    written when it ends (the module docstring)."""

    rings_apart = (".runs.memory.frames", ".runs.memory.position")  # 1M frames per run: saved as what changed
    options = ("mmc_unfinished",)
    serves = "environments stepped through a pool of emulators (montezuma, atari:NAME)"

    def __init__(self, stepping: PoolStepping):
        self.stepping, self.static, self.frames = stepping, stepping.static, stepping.frames
        self.envs_per_run, self.frame_shape = stepping.envs_per_run, stepping.frame_shape
        self.episode_window = stepping.episode_window

    def example_item(self, env: PoolEnv) -> None:
        del env
        return None

    def add_first(self, ring: frame_replay.FrameReplay, obs: jax.Array) -> frame_replay.FrameReplay:
        """``ring`` with ``obs`` (one stack) stored as an episode's first slot."""
        return frame_replay.add(ring, newest_frame(obs), jnp.int32(0), jnp.float32(0), jnp.bool_(False),
                                jnp.bool_(False), jnp.bool_(True))

    def init(self, env: PoolEnv, start: StepOutput) -> frame_replay.FrameReplay:
        """One ring per environment, holding its first observation as an episode's first slot."""
        del start
        capacity = self.static.buffer_size // self.envs_per_run
        learned = self.stepping.counting.learns
        return jax.vmap(lambda obs: self.add_first(frame_replay.init(capacity, self.frame_shape, learned), obs))(
            env.obs)

    def add(self, run: Any, decision: Decision, outcome: Outcome) -> tuple[frame_replay.FrameReplay, None]:
        """Stores each environment's received frame with the transition that led to it."""
        reward = self.frames.train_reward(outcome.reward) - run.hparams["reward_subtract"]
        memory = jax.vmap(frame_replay.add)(run.memory, newest_frame(outcome.obs), decision.actions, reward,
                                            outcome.terminated, outcome.truncated, outcome.first,
                                            decision.count_target)
        return memory, None

    def settle(self, runs: Any, outcome: Outcome) -> Any:
        """Monte Carlo returns of the episodes that just ended (a ``cond`` taken only when some episode ended)."""
        ended = outcome.terminated | outcome.truncated  # [runs, envs]
        fill = jax.vmap(frame_replay.fill_episode_returns, in_axes=(0, None, None, 0))

        def fill_all(memory, ended):
            return jax.vmap(lambda m, e: fill(m, self.static.gamma, self.episode_window, e))(memory, ended)

        memory = jax.lax.cond(jnp.any(ended), fill_all, lambda m, e: m, runs.memory, ended)
        return runs.replace(memory=memory)

    def sample(self, run: Any, key: jax.Array) -> Batch:
        """``batch_size`` windows, an equal share from each environment's ring."""
        static, envs = self.static, self.envs_per_run
        share = static.batch_size // envs
        rings = jax.vmap(frame_replay.sample, in_axes=(0, 0, None, None))(
            run.memory, jax.random.split(key, envs), share, static.n_step)
        flat = jax.tree.map(lambda x: x.reshape((static.batch_size,) + x.shape[2:]), rings)
        columns = jax.vmap(lambda frame: self.stepping.counting.columns(run, frame))

        def reached():
            frames = jax.vmap(frame_replay.frames_after, in_axes=(0, 0, None))(run.memory, rings.slots, static.n_step)
            return frames.reshape((static.batch_size, static.n_step) + self.frame_shape)[..., None]

        unfinished = jax.vmap(frame_replay.return_unknown)(run.memory, rings.slots, run.env.episode_steps)
        learned = {} if flat.count_targets is None else {"count_targets": lambda: flat.count_targets}
        return Batch(
            actions=flat.actions, rewards=flat.rewards, terminated=flat.terminated, included=flat.included,
            weights=flat.valid.astype(jnp.float32), mc_return=flat.mc_return, mc_known=~unfinished.reshape(-1),
            lazy=dict(
                obs=lambda: to_network_input(flat.obs),
                next_obs=lambda: to_network_input(flat.next_obs),
                step_obs=lambda: flat.count_frames[..., None],
                reached_obs=reached,
                step_columns=lambda: jax.vmap(columns)(flat.count_frames),
                next_columns=lambda: columns(newest_frame(flat.next_obs)),
                **learned,
            ),
        )

    def acted(self, decision: Decision, outcome: Outcome) -> dict[str, Callable[[], Any]]:
        """The acted step as a one-step window: the newest frame of ``s_t`` and of the state it reached."""
        return dict(step_obs=lambda: decision.before[:, None, ..., None],
                    reached_obs=lambda: newest_frame(outcome.obs)[:, None, ..., None])

    def recent(self, run: Any, count: int) -> tuple[jax.Array, jax.Array]:
        """The newest ``count`` frames (an equal share from each ring), ``[count, 84, 84, 1]``, and whether each is
        stored."""
        share = max(1, count // self.envs_per_run)
        frames, stored = jax.vmap(frame_replay.newest_frames, in_axes=(0, None))(run.memory, share)
        return frames.reshape((-1,) + self.frame_shape)[..., None], stored.reshape(-1).astype(jnp.float32)



PoolStepping.replay_class, PoolStepping.counting_class = FrameRingReplay, FrameCounting
PoolStepping.learned_counting_class = FrameLearnedCounting

def first_output(num_envs: int, shapes: PoolShapes = PoolShapes()) -> StepOutput:
    """A pool's first ``StepOutput`` as zeros of the right shapes (for shape-only uses, such as memory estimates)."""
    zeros = np.zeros(num_envs)
    return StepOutput(obs=np.zeros((num_envs, *shapes.obs_shape), np.uint8), reward=zeros.astype(np.float32),
                      terminated=zeros.astype(bool), truncated=zeros.astype(bool), first=np.ones(num_envs, bool),
                      room=np.ones(num_envs, np.int32), lives=zeros.astype(np.int32))


__all__ = ["ATARI_FRAMES", "NUM_ROOMS", "FrameCounting", "FrameFeatures", "FrameRingReplay", "PoolEnv", "PoolStepping",
           "PoolShapes", "first_output", "to_network_input"]
