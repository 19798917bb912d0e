"""The compact stepping: environments stepped inside the compiled program, one per run, replay of compact states.

Every run owns one :class:`~opiq_jax.envs.base.CompactEnvironment` (its own parameters: the chain's
flips, the maze's action permutations), stepped under the trainer's ``vmap`` over runs. The replay
stores each step's compact state and the compact state it reached (a few integers), and observations
are rebuilt from them when a minibatch is sampled. Counting reads SimHash codes of the observation (the
paper) or the environment's exact cell id; where the environment lists every cell
(``has_cell_table``) each cell's sketch columns are computed once, at initialisation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from . import Batch, Counting, Decision, Stepping, Outcome, Replay, Steps
from ..common.config import StaticConfig
from ..envs.base import CompactEnvironment
from ..primitives import counts, replay
from ..primitives.targets import window_mask
from .learned import LearnedCounting
from .sketch import SketchCounting


@struct.dataclass
class Transition:
    """One stored environment step, compact: observations are rebuilt from ``compact`` on demand."""

    compact: jax.Array  # [compact_dim]: s_t (int32 cell coordinates; float32 observation for gymnax envs)
    action: jax.Array  # int32
    reward: jax.Array  # float32: the training reward (after R-Subtract)
    terminated: jax.Array  # bool: s_{t+1} is a true terminal
    done: jax.Array  # bool: the episode ended at this step (terminated or truncated)
    next_compact: jax.Array  # [compact_dim]: s_{t+1} before any auto-reset
    count_target: Any = None  # what a learned count keeps with the step (its packed coin flips); None: nothing


@struct.dataclass
class EnvData:
    """One run's environment: its parameters, its state and the observation it acts on next."""

    params: Any
    state: Any
    obs: jax.Array


@struct.dataclass
class CountFeatures:
    """What turns a compact state into sketch columns for one run."""

    hash_matrix: jax.Array  # float32[k, obs_dim] (SimHash) or float32[0] (exact counts)
    cell_columns: jax.Array  # int32[num_cells, rows]: every cell's columns (with a cell table), else int32[0, rows]


class CompactStepping(Stepping):
    """In-program environments and a compact replay (module docstring)."""

    envs_per_run = 1  # environments_per_run's, whatever the option: one environment per run under vmap
    has_test_episode = True
    overlaps = False
    metric_names: tuple[str, ...] = ()

    def __init__(self, env: CompactEnvironment, static: StaticConfig,
                 replay: Callable[[CompactStepping], Replay] | None = None,
                 counting: Callable[[CompactStepping], Counting] | None = None):
        if not isinstance(env, CompactEnvironment):
            raise TypeError(f"{type(env).__name__} is not a CompactEnvironment (opiq_jax.envs.base): the trainer "
                            "needs its compact states, cell ids and start state")
        self.env, self.static = env, static
        self.num_actions = env.num_actions
        self.obs_shape = tuple(env.observation_space(env.default_params).shape)
        self.obs_dim = int(np.prod(self.obs_shape))
        self.has_cell_table = bool(env.has_cell_table)
        self.horizon = int(env.default_params.max_steps_in_episode)
        self.visit_sizes = {"states_visited": env.num_cells, "state_actions_visited": env.num_cells * env.num_actions}
        self.counting = (counting or self.counting_class)(self)
        self.replay = (replay or self.replay_class)(self)

    # ------------------------------------------------------------------ environment

    def initial(self, start: Any, num_runs: int) -> tuple[None, None]:
        """No state shared by the runs and no start from outside the program."""
        del start, num_runs
        return None, None

    def init_env(self, reset_key: jax.Array, env_key: jax.Array, start: Any) -> EnvData:
        """One run's environment parameters (from ``env_key``) and its first state (from ``reset_key``)."""
        del start
        params = self.env.sample_params(env_key)
        obs, state = self.env.reset(reset_key, params)
        return EnvData(params=params, state=state, obs=obs)

    def observations(self, env: EnvData) -> jax.Array:
        """``[1, *obs_shape]``: what the run acts on."""
        return env.obs[None]

    def count_keys(self, env: EnvData) -> jax.Array:
        """``[1, compact_dim]``: the current state as it is counted and stored."""
        return self.env.compact_state(env.state)[None]

    def step(self, shared: None, runs: Any, decision: Decision) -> tuple[None, Any, Outcome]:
        """Every run's environment steps under ``vmap``."""

        def one(env: EnvData, actions: jax.Array, key: jax.Array) -> tuple[EnvData, Outcome]:
            obs, state, reward, terminated, truncated, info = self.env.step(key, env.state, actions[0], env.params)
            outcome = Outcome(obs=obs[None], reward=reward[None], terminated=terminated[None],
                              truncated=truncated[None], first=jnp.zeros((1,), bool),
                              extra={"next_compact": info["compact"][None], "cell_id": info["cell_id"][None]})
            return env.replace(state=state, obs=obs), outcome

        env, outcome = jax.vmap(one)(runs.env, decision.actions, decision.env_key)
        return shared, runs.replace(env=env), outcome

    def cell_table_obs(self, run: Any) -> jax.Array:
        """``[num_cells, *obs_shape]``: the observation of every cell (``has_cell_table`` only)."""
        return self.replay.obs_of(run, self.env.all_compacts())

    # ------------------------------------------------------------------ statistics

    def initial_visits(self, env: EnvData, start: Any) -> dict[str, jax.Array]:
        del start
        cell = self.env.cell_id(self.env.compact_state(env.state))
        return {"states_visited": jnp.zeros((self.env.num_cells,), bool).at[cell].set(True),
                "state_actions_visited": jnp.zeros((self.visit_sizes["state_actions_visited"],), bool)}

    def visits(self, run: Any, decision: Decision, outcome: Outcome) -> dict[str, jax.Array]:
        """Flat indices ([1]) of what this step visited: the cell reached, and the (cell, action) taken."""
        cell = self.env.cell_id(decision.before[0])
        return {"states_visited": outcome.extra["cell_id"],
                "state_actions_visited": (cell * self.num_actions + decision.actions[0])[None]}

    def bonus_obs(self, obs: jax.Array) -> jax.Array:
        """What bonus networks (RND) read of an observation: all of it."""
        return obs

    def start_state(self, run: Any) -> tuple[jax.Array, jax.Array]:
        """The start state's observation and its count key (where ``q_start`` is measured)."""
        start = self.env.start_compact(run.env.params)
        return self.env.obs_from_compact(start, run.env.params), start

    def test_return(self, run: Any, greedy_action, reset_key: jax.Array, steps_key: jax.Array) -> jax.Array:
        """The return of one episode acting with ``greedy_action(obs)``, run to the horizon with keys of its own.
        Its steps do not reset (``step_in_episode``): what follows the episode's end counts for nothing."""
        obs, env_state = self.env.reset(reset_key, run.env.params)

        def body(carry, k):
            obs, env_state, total, alive = carry
            action = greedy_action(obs)
            obs, env_state, reward, terminated, truncated = self.env.step_in_episode(k, env_state, action,
                                                                                     run.env.params)
            total = total + jnp.where(alive, reward, 0.0)
            alive = alive & ~(terminated | truncated)
            return (obs, env_state, total, alive), None

        (_, _, total, _), _ = jax.lax.scan(
            body, (obs, env_state, jnp.float32(0), jnp.bool_(True)), jax.random.split(steps_key, self.horizon)
        )
        return total

    def metrics(self, run: Any) -> dict[str, jax.Array]:
        del run
        return {}


class CompactCounting(SketchCounting):
    """The paper's counts of a state stepped in the program: SimHash codes of its observation (``count_features
    simhash``) or the environment's exact cell id (``exact``), into the sketch."""

    options = ("count_features",)
    serves = "the chain, the maze and gymnax environments"

    def __init__(self, stepping: CompactStepping):
        super().__init__(stepping.static)
        self.env, self.obs_dim, self.has_cell_table = stepping.env, stepping.obs_dim, stepping.has_cell_table
        self.counted = (f"SimHash codes of {self.static.simhash_bits} bits of the observation"
                        if self.static.count_features == "simhash" else "the environment's exact cell id")

    def columns_of(self, features: CountFeatures, env_params: Any, compact: jax.Array) -> jax.Array:
        """Sketch columns of the state ``compact`` under the run's counting features."""
        if self.static.count_features == "exact":
            code = counts.cell_code(self.env.cell_id(compact))
        else:
            code = counts.simhash_code(features.hash_matrix, self.env.obs_from_compact(compact, env_params))
        return counts.sketch_columns(code, self.static.sketch_rows, self.static.sketch_width)

    def init_features(self, hash_key: jax.Array, env: EnvData) -> CountFeatures:
        """The run's SimHash matrix and, with a cell table, every cell's sketch columns (computed once)."""
        static = self.static
        if static.count_features == "simhash":
            hash_matrix = counts.simhash_matrix(hash_key, static.simhash_bits, self.obs_dim)
        else:
            hash_matrix = jnp.zeros((0,), jnp.float32)
        features = CountFeatures(hash_matrix=hash_matrix, cell_columns=jnp.zeros((0, static.sketch_rows), jnp.int32))
        if self.has_cell_table:
            table = jax.vmap(lambda c: self.columns_of(features, env.params, c))(self.env.all_compacts())
            features = features.replace(cell_columns=table)
        return features

    def columns(self, run: Any, compact: jax.Array) -> jax.Array:
        """Sketch columns of ``compact``: looked up in the run's per-cell table where there is one.

        The chain and the maze have few cells, so every cell's code is computed once at ``init``:
        counting then costs a lookup per state instead of a projection, and a state's code cannot
        depend on how (batched or not) it was computed. Other environments hash every time.
        """
        if self.has_cell_table:
            return run.counts.features.cell_columns[self.env.cell_id(compact)]
        return self.columns_of(run.counts.features, run.env.params, compact)


class CompactReplay(Replay):
    """One ring of :class:`Transition` per run, uniform windows, observations rebuilt from the compact states of the
    stepping's environment when a batch reads them."""

    keeps_steps = True

    def __init__(self, stepping: CompactStepping):
        self.stepping, self.env, self.static = stepping, stepping.env, stepping.static

    def example_item(self, env: EnvData) -> Transition:
        compact = self.env.compact_state(env.state)
        target = self.stepping.counting.draw_targets(jax.random.key(0), 1)
        return Transition(compact=compact, action=jnp.int32(0), reward=jnp.float32(0), terminated=jnp.bool_(False),
                          done=jnp.bool_(False), next_compact=compact,
                          count_target=None if target is None else jnp.zeros_like(target[0]))

    def init(self, env: EnvData, start: Any) -> replay.ReplayBuffer:
        del start
        return replay.init(self.example_item(env), self.static.buffer_size)

    def add(self, run: Any, decision: Decision, outcome: Outcome) -> tuple[replay.ReplayBuffer, Transition]:
        """Stores ``(s_t, a_t, r_t - reward_subtract, terminated, done, s_{t+1})``; returns the buffer and the item."""
        item = Transition(
            compact=decision.before[0], action=decision.actions[0],
            reward=(outcome.reward[0] - run.hparams["reward_subtract"]).astype(jnp.float32),
            terminated=outcome.terminated[0], done=outcome.terminated[0] | outcome.truncated[0],
            next_compact=outcome.extra["next_compact"][0],
            count_target=None if decision.count_target is None else decision.count_target[0],
        )
        return replay.add(run.memory, item), item

    def steps(self, items: Transition) -> Steps:
        return Steps(action=items.action, terminated=items.terminated, done=items.done, state=items.compact,
                     reached=items.next_compact)

    def obs_of(self, run: Any, compact: jax.Array) -> jax.Array:
        """Observations of a batch of compact states (any leading shape)."""
        lead = compact.shape[: compact.ndim - 1]
        flat = compact.reshape((-1, compact.shape[-1]))
        obs = jax.vmap(self.env.obs_from_compact, in_axes=(0, None))(flat, run.env.params)
        return obs.reshape(lead + obs.shape[1:])

    def sample(self, run: Any, key: jax.Array) -> Batch:
        """``batch_size`` windows of ``n_step`` stored steps, uniformly over the stored steps."""
        windows, exists = replay.sample_windows(run.memory, key, self.static.batch_size, self.static.n_step)
        return self.batch_of(run, windows, exists)

    def batch_of(self, run: Any, windows: Transition, exists: jax.Array) -> Batch:
        """The minibatch of the windows ``windows`` (``[B, n]`` transitions; ``exists``: which are stored)."""
        included = window_mask(windows.done, exists)
        last = jnp.sum(included.astype(jnp.int32), axis=1) - 1
        next_compact = jnp.take_along_axis(windows.next_compact, last[:, None, None], axis=1)[:, 0]
        columns = jax.vmap(lambda c: self.stepping.counting.columns(run, c))
        learned = {} if windows.count_target is None else {"count_targets": lambda: windows.count_target}
        return Batch(
            actions=windows.action, rewards=windows.reward, terminated=windows.terminated, included=included,
            lazy=dict(
                obs=lambda: self.obs_of(run, windows.compact[:, 0]),
                next_obs=lambda: self.obs_of(run, next_compact),
                step_obs=lambda: self.obs_of(run, windows.compact),
                reached_obs=lambda: self.obs_of(run, windows.next_compact),
                step_columns=lambda: jax.vmap(columns)(windows.compact),
                next_columns=lambda: columns(next_compact),
                cells=lambda: jax.vmap(self.env.cell_id)(windows.compact[:, 0]),
                next_cells=lambda: jax.vmap(self.env.cell_id)(next_compact),
                **learned,
            ),
        )

    def recent(self, run: Any, count: int) -> tuple[jax.Array, jax.Array]:
        """The ``count`` most recently reached states' observations and whether each is stored (1.0) yet."""
        slots, stored = replay.newest_slots(run.memory, count)
        stored = stored.astype(jnp.float32)
        return self.obs_of(run, run.memory.items.next_compact[slots]), stored



CompactStepping.replay_class, CompactStepping.counting_class = CompactReplay, CompactCounting
CompactStepping.learned_counting_class = LearnedCounting

__all__ = ["CompactCounting", "CompactStepping", "CompactReplay", "CountFeatures", "EnvData", "Transition"]
