"""The three contracts an environment's spec composes, and the types they and the parts share.

The one trainer (:mod:`opiq_jax.agent.trainer`) is written against three declared contracts:

* :class:`Stepping`: how the environments step and what the networks see; it owns ``envs_per_run``, the number of
  environments each run acts in at once;
* :class:`Counting`: what is counted and how often (``stepping.counting``);
* :class:`Replay`: what a run's replay keeps, how a step is stored in it and what a minibatch of it is
  (``stepping.replay``).

An environment's spec (:class:`~opiq_jax.registry.environments.EnvironmentSpec`) names its stepping class, and may
name its replay and its counting; each stepping class has its own of both by default. Two stepping classes ship:

* :class:`~opiq_jax.contracts.compact.CompactStepping`: environments stepped inside the compiled program, one
  per run under ``vmap`` (chain, maze, gymnax environments, your own); its replay stores compact
  states and rebuilds observations when it samples;
* :class:`~opiq_jax.contracts.pool.PoolStepping`: one EnvPool pool holding every run's emulators (Montezuma),
  stepped through EnvPool's XLA interface; its replay stores single frames and rebuilds stacks.

A stepping keeps per-run environment data (``run.env``) and, for the pool, the pool's handle shared by all runs
(``TrainState.env``); its replay keeps the per-run ``run.memory``, its counting ``run.counts``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

import jax
from flax import struct


@struct.dataclass
class Decision:
    """What a run decided before the environment step (per run, ``E`` environments)."""

    actions: jax.Array  # int32[E]
    columns: jax.Array | None  # [E, ...]: where the current states are counted (the sketch's int32 columns, a learned
    # count's input features; None without counts)
    before: jax.Array  # the current states as the stepping remembers them ([E, compact_dim] or frames [E, H, W])
    env_key: jax.Array  # the run's key for this environment step
    bonus: jax.Array | None = None  # float32[E]: the parts' action bonus of the chosen actions (None: no part has one)
    count_target: jax.Array | None = None  # [E]: what a learned count keeps with each step (None: nothing)


@struct.dataclass
class Outcome:
    """What the environment step returned (per run, ``E`` environments)."""

    obs: jax.Array  # [E, ...]: the next observation to act on (after any auto-reset)
    reward: jax.Array  # float32[E]: the environment's reward (unclipped)
    terminated: jax.Array  # bool[E]: a true terminal (no bootstrap)
    truncated: jax.Array  # bool[E]: the time limit (bootstrap from the last real state)
    first: jax.Array  # bool[E]: no transition led here (EnvPool's reset step): not counted, not stored as one
    extra: dict  # the stepping's own fields (the compact stepping: next_compact, cell_id; the pool: room)


@struct.dataclass
class StepRecord:
    """One environment step of one run, as :meth:`Part.after_step` sees it."""

    decision: Decision
    outcome: Outcome
    item: Any  # what the replay stored (the compact replay's Transition), or None


class Batch:
    """A minibatch of ``n``-step windows (``B`` rows), as the trainer and every part see it, whatever the replay.

    Always present: ``actions`` (int32[B, n]), ``rewards`` (float32[B, n], the stored training rewards),
    ``terminated`` and ``included`` (bool[B, n]: the steps of the first step's episode), ``weights``
    (float32[B] or None: rows a sampler could not fill count 0), ``mc_return`` (float32[B] or None,
    where the replay keeps Monte Carlo returns; 0 where a row's episode has not ended) and ``mc_known`` (bool[B] or
    None: whether that episode has ended, so its return is known).

    Computed on first use (and then kept), so a program pays only for what its parts read:
    ``obs`` and ``next_obs`` (the network inputs of ``s_t`` and of the bootstrap state ``s_{t+L}``),
    ``step_obs`` and ``reached_obs`` (``[B, n, ...]``: each step's state and the state it reached, as bonus
    networks read them), ``step_columns`` / ``next_columns`` (count-min sketch columns), ``cells`` and ``next_cells``
    (cell ids of ``s_t`` and of the bootstrap states, for the per-cell tables), and from the trainer ``step_counts``
    (``N(s_{t+i}, a_{t+i})``, int32[B, n]) and ``next_counts`` (``N(s_{t+L}, .)``, int32[B, A]); a learned
    count's are float32. Where the counter learns (:attr:`Counting.learns`), ``count_targets`` ([B, n]): what each step
    was stored with for it.
    """

    def __init__(self, *, actions, rewards, terminated, included, weights=None, mc_return=None, mc_known=None,
                 lazy: dict[str, Callable[[], Any]]):
        self.actions, self.rewards, self.terminated, self.included = actions, rewards, terminated, included
        self.weights, self.mc_return, self.mc_known = weights, mc_return, mc_known
        self._lazy = dict(lazy)

    def add_lazy(self, **fields: Callable[[], Any]) -> None:
        """More fields computed on first use."""
        self._lazy.update(fields)

    def __getattr__(self, name: str) -> Any:
        lazy = self.__dict__.get("_lazy", {})
        if name not in lazy:
            raise AttributeError(f"this batch has no {name!r} "
                                 f"(its stepping provides {', '.join(sorted(lazy)) or 'nothing lazy'})")
        value = lazy.pop(name)()
        setattr(self, name, value)
        return value


class Steps(NamedTuple):
    """Stored steps as a replay that keeps them whole reads them out (:meth:`Replay.steps`), whatever its items'
    layout: a part with a ring of the replay's items of its own (DORA's) reads them through this."""

    action: jax.Array  # int32[...]
    terminated: jax.Array  # bool[...]: the step reached a true terminal
    done: jax.Array  # bool[...]: the episode ended at this step
    state: jax.Array  # [..., *state]: s_t as the replay stores it (see :meth:`Replay.obs_of`)
    reached: jax.Array  # [..., *state]: s_{t+1} before any auto-reset, likewise


class Contract:
    """What each of the contracts below declares: the static options that it alone reads."""

    options: ClassVar[tuple[str, ...]] = ()
    """The static options that it alone reads: set to another value than the default on an environment none of whose
    contracts read them, they would change nothing, and the plan refuses them."""
    serves: ClassVar[str] = ""
    """Where its ``options`` apply, in words, as the plan's refusal names them."""


class Replay(Contract, abc.ABC):
    """What a run's replay keeps (``run.memory``), how one step goes in and what comes out: a minibatch of ``n``-step
    windows, the newest states reached. Where the items sit in the ring is the replay's own business: the trainer
    and the parts see :class:`Batch`, :meth:`recent` and :meth:`steps`, never a slot or a field of an item.

    Per-run methods run under the trainer's ``vmap`` over runs (``run`` is one run's state); :meth:`settle` sees
    every run at once.
    """

    rings_apart: tuple[str, str] | None = None
    """A replay of frames too large to rewrite at every checkpoint: the key steppings of its frames leaf and its
    positions leaf in the training state, which checkpoints save as what changed (:mod:`opiq_jax.store.frames`)."""
    keeps_steps: ClassVar[bool] = False
    """Whether its items are whole steps a part may keep and read back (:meth:`example_item`, :meth:`steps`,
    :meth:`obs_of`)."""
    writes_priorities: ClassVar[bool] = False
    """Whether it takes each sampled row's TD error back after the loss (:meth:`prioritised`), as a prioritised replay
    writes its priorities; the trainer computes those errors only for such a replay."""

    @abc.abstractmethod
    def init(self, env: Any, start: Any) -> Any:
        """One run's empty replay (``run.memory``), from its environment data and what the reset returned."""

    @abc.abstractmethod
    def example_item(self, env: Any) -> Any:
        """One item as a part's ``init`` may shape its state after (None where the replay keeps no whole steps)."""

    @abc.abstractmethod
    def add(self, run: Any, decision: Decision, outcome: Outcome) -> tuple[Any, Any]:
        """``(replay, item)``: one run's replay with the step stored, and what was stored (None if nothing a part may
        keep)."""

    def settle(self, runs: Any, outcome: Outcome) -> Any:
        """Every run after its step was stored: what follows once an episode ends (the frame ring writes the Monte
        Carlo returns of the episodes that just ended); the default does nothing."""
        del outcome
        return runs

    @abc.abstractmethod
    def sample(self, run: Any, key: jax.Array) -> Batch:
        """A minibatch of ``n``-step windows from one run's replay (its rows' ``weights`` are where a prioritised
        replay puts its importance weights; the loss reads them)."""

    def prioritised(self, run: Any, batch: Batch, td_errors: jax.Array) -> Any:
        """One run's replay (``run.memory``) after an update learned from ``batch``, whose rows' absolute TD errors
        under the weights the loss read are ``td_errors`` (float32[B], the mean over heads): where a prioritised
        replay writes its priorities back to the slots it sampled (``writes_priorities`` only)."""
        raise NotImplementedError(f"{type(self).__name__} writes no priorities (writes_priorities is False)")

    @abc.abstractmethod
    def recent(self, run: Any, count: int) -> tuple[jax.Array, jax.Array]:
        """The states that the newest ``count`` stored steps reached, as bonus networks read them (the stepping's
        ``bonus_obs``), and float32 1.0 for each that is stored yet (0.0 where the ring holds fewer)."""

    def acted(self, decision: Decision, outcome: Outcome) -> dict[str, Callable[[], Any]]:
        """What a batch of one step's acted ``(s_t, a_t)`` (``[E, 1]`` windows) holds beyond actions and counts, as
        lazy fields (``step_obs``, ``reached_obs``), so the parts' intrinsic rewards read there as at sampling
        (steppings that record diagnostics; the default offers none)."""
        del decision, outcome
        return {}

    def steps(self, items: Any) -> Steps:
        """The stored steps ``items`` (any leading shape) read out (``keeps_steps`` only)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no whole steps (keeps_steps is False)")

    def obs_of(self, run: Any, states: jax.Array) -> jax.Array:
        """The observations of states as :meth:`steps` gives them (``keeps_steps`` only)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no whole steps (keeps_steps is False)")


class Counting(Contract, abc.ABC):
    """What is counted and how often: one run's counts (``run.counts``, any pytree), where a state is counted (its
    *columns*, from the stepping's count key of the state) and ``N(s, a)`` read there. The trainer and the parts see
    counts only through it (``Batch.step_counts``, ``next_counts``; the action bonus's ``counts``).

    A counter that learns (``learns``: :class:`~opiq_jax.contracts.learned.LearnedCounting`) has a
    ``count_target`` drawn for every step (:meth:`draw_targets`), which the replay stores with the step and gives
    back as the batch's ``count_targets``, and it takes a step of its own on every update's minibatch (:meth:`learn`).

    Per-run methods run under the trainer's ``vmap`` over runs (``run`` is one run's state)."""

    learns: ClassVar[bool] = False
    """Whether its counts are learned from the replay's minibatches (:meth:`draw_targets`, :meth:`learn`)."""
    counted: str = ""
    """What it counts, in words, as a results folder's ``config.json`` records it."""
    metric_names: tuple[str, ...] = ()
    """Its own metrics, returned by :meth:`metrics` (the count-min sketch's over-counting, where it is measured)."""

    @abc.abstractmethod
    def init(self, hash_key: jax.Array, env: Any, num_actions: int) -> Any:
        """One run's counts, all zero (``hash_key``: its features' randomness, SimHash's projection)."""

    @abc.abstractmethod
    def columns(self, run: Any, key: jax.Array) -> jax.Array:
        """Where the state of count key ``key`` (the stepping's :meth:`Stepping.count_keys`) is counted: an int32
        array of the counter's own shape (the sketch's ``[rows]``)."""

    @abc.abstractmethod
    def add(self, counts: Any, decision: Decision, outcome: Outcome) -> Any:
        """``counts`` with each real ``(s_t, a_t)`` of the run's ``E`` environments added (``decision.columns``; a
        ``first`` slot of a pool is no transition)."""

    @abc.abstractmethod
    def query(self, counts: Any, columns: jax.Array, action: jax.Array) -> jax.Array:
        """``N(s, a)`` (int32) of the state at ``columns``."""

    @abc.abstractmethod
    def query_all(self, counts: Any, columns: jax.Array) -> jax.Array:
        """``N(s, .)`` (int32[A]) of the state at ``columns``."""

    def metrics(self, run: Any) -> dict[str, jax.Array]:
        """One run's values of ``metric_names`` (the default has none)."""
        del run
        return {}

    def draw_targets(self, key: jax.Array, envs: int) -> jax.Array | None:
        """``[envs]``: what the replay keeps with each of a run's ``envs`` steps for :meth:`learn` (``learns``
        only; the default keeps nothing)."""
        del key, envs
        return None

    def learn(self, run: Any, batch: Batch, key: jax.Array) -> Any:
        """One run's counts after a step of learning from ``batch`` (its ``count_targets``), ``learns`` only."""
        raise NotImplementedError(f"{type(self).__name__} does not learn its counts (learns is False)")


class Stepping(Contract, abc.ABC):
    """What the trainer asks of an environment family: how its environments are stepped and what is seen, with what
    counts its states (``counting``, a :class:`Counting`) and its replay (``replay``, a :class:`Replay`).
    :class:`~opiq_jax.contracts.compact.CompactStepping` and :class:`~opiq_jax.contracts.pool.PoolStepping`
    implement it.

    What a stepping can do beyond the common contract is declared, never probed: ``has_test_episode``,
    ``has_cell_table`` and ``overlaps`` say which of the optional methods below it implements. Per-run methods run
    under the trainer's ``vmap`` over runs (``run`` is one run's state); ``runs`` methods see every run at once.
    """

    started_by_host: ClassVar[bool] = False
    """Whether its environments are started on the host, before the program, and handed to ``init`` (a pool of
    emulators, which the pure functions cannot hold): its trainer must be given them."""
    replay_class: ClassVar[type[Replay]]
    """The replay its runs keep unless the environment's spec names another."""
    counting_class: ClassVar[type[Counting]]
    """What counts its states unless the environment's spec names another."""
    learned_counting_class: ClassVar[type[Counting] | None] = None
    """What counts its states with ``count_features cfn`` (a learned pseudo-count); None where it has none."""
    num_actions: int
    envs_per_run: int
    """``E``: the environments each run acts in at once, :meth:`environments_per_run` of the configuration. Every
    other module asks the stepping (or :func:`~opiq_jax.registry.environments.envs_per_run`), never the option."""
    obs_shape: tuple[int, ...]
    """What the Q-network reads of one state."""
    visit_sizes: Mapping[str, int]
    """The visit metrics it tracks (``states_visited``, ``rooms_visited``, ...) and how many distinct things each
    can count."""
    metric_names: tuple[str, ...] = ()
    """Its own metrics, returned by :meth:`metrics`."""
    counting: Counting
    """What counts its states."""
    replay: Replay
    """Its runs' replay."""
    has_test_episode: ClassVar[bool] = False
    """Whether a greedy test episode is played in the program (:meth:`test_return`)."""
    has_cell_table: bool = False
    """Whether every state is one of a finite table of cells (:meth:`cell_table_obs`): the target values may then
    be looked up per cell (``target_values``)."""
    overlaps: bool = False
    """Whether the environment's step may overlap the learner's update (:meth:`send`, then :meth:`receive`)."""
    records_diagnostics: ClassVar[bool] = False
    """Whether its runs record the learning diagnostics (``state.Diagnostics``: the largest TD error and |Q|, the
    bonuses where the run acts and samples, the unknown Monte Carlo returns); they replace ``qplus_start`` in its
    metrics."""

    @classmethod
    def environments_per_run(cls, chosen: int) -> int:
        """``E`` for a configuration whose ``envs_per_run`` option is ``chosen``: one by default (a stepping that
        steps several environments per run reads the option, and declares it in ``options``)."""
        del chosen
        return 1

    # ---------------------------------------------------------------- starting
    @abc.abstractmethod
    def initial(self, start: Any, num_runs: int) -> tuple[Any, Any]:
        """``(shared state, per-run starts)`` from what the environment's reset returned (None: nothing)."""

    @abc.abstractmethod
    def init_env(self, reset_key: jax.Array, env_key: jax.Array, start: Any) -> Any:
        """One run's environment data (``run.env``)."""

    @abc.abstractmethod
    def initial_visits(self, env: Any, start: Any) -> dict[str, jax.Array]:
        """Per visit metric, what one run has seen at the start (bool[size])."""

    def restart(self, state: Any, pool: Any) -> Any:
        """``state`` with its environments started afresh after a resume (a pool's emulators are not saved)."""
        del pool
        return state

    # ---------------------------------------------------------------- acting and stepping
    @abc.abstractmethod
    def observations(self, env: Any) -> jax.Array:
        """``[E, *obs_shape]``: what one run acts on now."""

    @abc.abstractmethod
    def count_keys(self, env: Any) -> jax.Array:
        """``[E, ...]``: what the counts are keyed by for the current states (see :meth:`Counting.columns`)."""

    @abc.abstractmethod
    def step(self, shared: Any, runs: Any, decision: Decision) -> tuple[Any, Any, Outcome]:
        """Every run's environments stepped with ``decision``: ``(shared, runs, outcome)``."""

    def send(self, shared: Any, decision: Decision) -> Any:
        """Starts the step of ``decision`` (``overlaps`` only): the learner runs while the environments step."""
        raise NotImplementedError(f"{type(self).__name__} does not overlap its step (overlaps is False)")

    def receive(self, shared: Any, runs: Any) -> tuple[Any, Any, Outcome]:
        """Ends the step that :meth:`send` started (``overlaps`` only)."""
        raise NotImplementedError(f"{type(self).__name__} does not overlap its step (overlaps is False)")

    # ---------------------------------------------------------------- what a step visited
    @abc.abstractmethod
    def visits(self, run: Any, decision: Decision, outcome: Outcome) -> dict[str, jax.Array]:
        """Per visit metric, the indices one run's step reached."""

    # ---------------------------------------------------------------- what the networks read
    @abc.abstractmethod
    def bonus_obs(self, obs: jax.Array) -> jax.Array:
        """Observations as a bonus network (RND's, DORA's) reads them."""

    def cell_table_obs(self, run: Any) -> jax.Array:
        """``[num_cells, *obs_shape]``: the observation of every cell (``has_cell_table`` only)."""
        raise NotImplementedError(f"{type(self).__name__} has no cell table (has_cell_table is False)")

    # ---------------------------------------------------------------- reporting
    @abc.abstractmethod
    def start_state(self, run: Any) -> tuple[jax.Array, jax.Array]:
        """One run's start state: its observation and count key (for ``q_start`` and ``qplus_start``)."""

    def test_return(self, run: Any, greedy_action: Any, reset_key: jax.Array, steps_key: jax.Array) -> jax.Array:
        """The return of one greedy episode (``has_test_episode`` only)."""
        raise NotImplementedError(f"{type(self).__name__} plays no test episode (has_test_episode is False)")

    @abc.abstractmethod
    def metrics(self, run: Any) -> dict[str, jax.Array]:
        """One run's values of ``metric_names``."""


__all__ = ["Batch", "Contract", "Counting", "Decision", "Stepping", "Outcome", "Replay", "StepRecord", "Steps"]
