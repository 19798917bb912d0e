"""One compiled trainer for every run of an experiment, on every environment.

``make_train(static)`` returns a :class:`Trainer` of pure functions:

* ``init(run_keys, env_keys, hparams, start=None) -> TrainState``: every leaf of ``state.runs`` has a
  leading runs axis; ``run_keys`` seed the networks, SimHash matrices and the acting/learning
  randomness, ``env_keys`` draw each run's environment parameters (pass one key repeated for a shared
  action mask); ``start`` is what a pool environment's reset returned (``None`` for the others).
* ``train_chunk(state) -> (state, metrics)``: a ``lax.scan`` over ``static.log_every`` environment
  steps of every run at once, then the chunk's metrics (one value per run for each of
  ``trainer.metric_names``).

The agent is DQN with the exploration parts of ``static.parts`` (:mod:`opiq_jax.parts`), called at
fixed places; nothing here names a method. What differs between environments (how they are stepped,
what is counted) is the stepping's, and what the replay stores is its replay's (:mod:`opiq_jax.contracts`).

Order within one environment step: choose the action with the counts as they are, step the
environment, increment ``N(s_t, a_t)``, store the transition, then train (a pool stepping may overlap
training with the emulators' step, see ``Execution.overlap``). What is common to all runs (the step
counter, "train now", "copy the target now") stays outside the vmap, so it remains a real
``lax.cond`` instead of a select that would run both branches for every run.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp

from ..common.config import HParams, StaticConfig, hparam_options
from ..kernels.mlp_backward import SQUARE_SUMS
from ..parts import PARTS, Example, Part, checked_metrics, checked_output, checked_state, get_part
from ..contracts import Batch, Decision, Stepping, Outcome, StepRecord
from ..contracts.pool import ATARI_FRAMES
from ..primitives.networks import init_params, init_variables, make_bootstrapped_network, make_network, network_for
from ..primitives.optimiser import make_optimiser
from ..primitives.state import (DIAGNOSTIC_METRICS, ChunkStats, Diagnostics, RunState, RunStats, TrainState,
                                all_finite)
from ..primitives.targets import bootstrap_value, mixed_monte_carlo, n_step_return, td_loss
from ..registry.environments import contracts_of, environment_spec
from .backward import LeanBackward, XlaBackward
from .bootstrap_values import target_values
from .weights import WeightStorage, sgd_step, weight_storage

METRIC_DOCS = {
    "train_return": "mean return of the training episodes that ended in the chunk (NaN if none)",
    "episodes": "training episodes that ended in the chunk",
    "test_return": "return of one greedy episode on plain Q (the heads' majority vote for BSP)",
    "max_return": "largest training episode return so far",
    "states_visited": "distinct environment cells visited so far",
    "state_actions_visited": "distinct (cell, action) pairs taken so far",
    "rooms_visited": "distinct rooms (Montezuma: RAM byte 3) seen so far",
    "q_start": "max_a Q(s_0, a) at the start state (mean over heads)",
    "qplus_start": "max_a of Q(s_0, a) plus every part's action bonus (OPIQ: + C_action / (N(s_0, a) + 1)^M)",
    "loss": "mean TD loss of the chunk's updates",
    "epsilon": "epsilon at the end of the chunk",
    "intrinsic_reward": "mean intrinsic reward of the chunk's sampled transitions (all parts)",
    "nonfinite": "1 once the run's loss, Q-values or parameters were NaN or infinite (the other runs go on)",
    "env_restarts": "times a resume restarted the run's emulators with fresh episodes (pool environments)",
    "td_error_max": "largest |y - Q(s, a)| over the valid rows of the chunk's updates (pool environments)",
    "q_abs_max": "largest |Q(s, a)| over the sampled start states and every action of the chunk's updates (pool)",
    "acted_intrinsic": "mean intrinsic reward (every part's) of the (s, a) the run acted in, with the counts just "
                       "after each step (pool)",
    "acted_bonus": "mean action bonus (every part's) of the actions the run chose, as the choice saw it (pool)",
    "sampled_bonus": "mean action bonus (every part's) of the sampled (s_t, a_t), with the counts at the update (pool)",
    "unknown_return_share": "share of the sampled transitions whose episode had not ended, so their Monte Carlo "
                            "return was still unknown (pool)",
    "sketch_overcount": "mean over-count of the count-min sketch (sketch minus exact) over the probe's (code, action) "
                        "pairs (pool)",
    "sketch_false_visits": "share of the probe's never-taken (code, action) pairs that the sketch reads as taken "
                           "(pool)",
    "probe_codes": "codes whose exact counts the probe keeps (pool; at most opiq_jax.contracts.pool.PROBE_SLOTS)",
    "count_nonfinite": "1 where the learned count's network, optimiser or moments are NaN or infinite (count_features "
                       "cfn; the run is then flagged nonfinite too)",
}
"""What each metric of the results' ``metrics.csv`` means."""

STREAM_SLOTS = 5
"""Named keys for the parts' initial states (``Agent.init_key``) were once drawn as this many splits of a run's part
key, each name in a fixed slot; the paper's parts declare their slots (``Part.random_streams``) and the trainer keeps
its own below, so runs reproduce bit for bit. Any other name's key is derived from the name alone."""
TRAINER_STREAMS = {"head": 4}
"""The trainer's own named keys: which BSP head each environment acts with first."""


def stream_slot(name: str) -> int | None:
    """The slot of the named key ``name`` (the trainer's, or one a registered part declares), if it has one."""
    if name in TRAINER_STREAMS:
        return TRAINER_STREAMS[name]
    return next((part.random_streams[name] for part in PARTS.values() if name in part.random_streams), None)
PACKING_STREAM = 0x9AC4
"""``fold_in`` of an update's sampling key giving packed storage's rounding key (the parts' keys fold in 1, 2, ...)."""
COUNT_STREAM = 0xC0C0
"""``fold_in`` of an update's sampling key giving a learned count's key for its own step."""
COUNT_TARGETS_STREAM = 0xC01F
"""``fold_in`` of a step's environment key giving a learned count's draw of the targets stored with the step."""


def network_name(static: StaticConfig, obs_shape: tuple[int, ...]) -> str:
    """``static.network``, or for ``auto`` :func:`~opiq_jax.primitives.networks.network_for` the observation."""
    return network_for(static.network, obs_shape)


def uses_pallas_torso(static: StaticConfig, net_name: str) -> bool:
    """Whether the maze network's convolutions run as Pallas kernels (``Execution.maze_torso``)."""
    if net_name != "maze_conv" or static.execution.maze_torso == "xla":
        return False
    return static.execution.maze_torso == "pallas" or (static.execution.precision == "bfloat16"
                                                       and jax.default_backend() == "gpu")


def uses_lean_backward(static: StaticConfig, net_name: str, parts: tuple, weights: WeightStorage) -> bool:
    """Whether the Q-network's backward pass is :mod:`mlp_backward`'s (``Execution.mlp_backward``): where the
    weight storage's step takes the kernels' square sums (packed storage), for the one-headed MLP with no part
    rescaling its gradients (the kernels' square sums are of the gradients as the backward pass writes them);
    ``auto`` on GPUs only. Other programs keep XLA's, as ``maze_torso`` leaves networks without the maze's
    convolutions alone."""
    if static.execution.mlp_backward == "xla" or not weights.takes_square_sums:
        return False
    rescaled = any(type(p).scale_gradients is not Part.scale_gradients for p in parts)
    applies = (net_name == "mlp" and len(static.hidden) > 0 and not rescaled  # no hidden layer: nothing to probe
               and all(p.heads(static) <= 1 for p in parts))
    return applies and (static.execution.mlp_backward == "pallas" or jax.default_backend() == "gpu")


def square_sum_probes(network, obs_shape: tuple[int, ...]) -> chex.ArrayTree:
    """Zeros for the probes of :mod:`mlp_backward`'s layers (the ``square_sums`` collection ``network`` makes)."""
    shapes = jax.eval_shape(network.init, jax.random.key(0), jnp.zeros((1, *obs_shape)))[SQUARE_SUMS]
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def make_stepping(static: StaticConfig, env: Any = None) -> Stepping:
    """The stepping of ``static.env``: its environment built from the registry, or ``env`` (a pool must
    be given: it is started by the host loop with every run's emulators)."""
    spec = environment_spec(static.env)
    stepping, replay, counting = contracts_of(spec, static)
    if stepping.started_by_host:
        if env is None:
            raise ValueError(f"{static.env} is a pool environment: pass its pool (or PoolShapes) to make_train")
        return stepping(env, static, spec.frames or ATARI_FRAMES, replay=replay, counting=counting)
    return stepping(spec.make(static) if env is None else env, static, replay=replay, counting=counting)


class Agent:
    """What the trainer's functions and the exploration parts share: configuration, networks, optimiser, stepping, its
    counting and its replay."""

    def __init__(self, static: StaticConfig, stepping: Stepping):
        self.static, self.stepping, self.counting, self.replay = static, stepping, stepping.counting, stepping.replay
        self.parts = tuple(get_part(name) for name in static.parts)
        for part in self.parts:
            if part.keeps_steps and not stepping.replay.keeps_steps:
                raise ValueError(f"the part {part.name} keeps replay steps of its own, which {static.env}'s replay "
                                 "does not keep whole")
        self.num_actions, self.envs_per_run = stepping.num_actions, stepping.envs_per_run
        heads = [part.heads(static) for part in self.parts if part.heads(static) > 1]
        if len(heads) > 1:
            raise ValueError(f"two parts of {static.parts} both set the number of Q-heads")
        self.num_heads = heads[0] if heads else 1
        self.network_name = network_name(static, stepping.obs_shape)
        self.compute_dtype = jnp.dtype(static.execution.precision)
        self.optimiser = make_optimiser(static)
        self.weights = weight_storage(static, self.optimiser)
        self.lean_backward = uses_lean_backward(static, self.network_name, self.parts, self.weights)
        if self.num_heads > 1:
            self.q_network = make_bootstrapped_network(self.network_name, self.num_actions, self.num_heads,
                                                       static.hidden, self.compute_dtype)
        else:
            self.q_network = make_network(self.network_name, self.num_actions, static.hidden, self.compute_dtype,
                                          uses_pallas_torso(static, self.network_name), self.lean_backward)
        self.backward = (LeanBackward(square_sum_probes(self.q_network, stepping.obs_shape), self.compute_dtype)
                         if self.lean_backward else XlaBackward())
        self.uses_counts = any(part.uses_counts for part in self.parts)
        self.targets = target_values(static, stepping)
        self.hparam_options = hparam_options(self.parts)

    def resolved(self) -> dict[str, str]:
        """What runs where an option says ``auto`` or leaves the choice to the environment, in words: the network,
        its precision and torso, the weight storage, the target values, the backward pass, what is counted, and
        what each part's own ``auto`` options chose (``Part.resolved``: BSP's prior values)."""
        maze = self.network_name == "maze_conv"
        torso = ("pallas" if uses_pallas_torso(self.static, self.network_name) else "xla") if maze else "-"
        parts = {key: value for part in self.parts for key, value in part.resolved(self).items()}
        return {"network": self.network_name + (f" with {self.num_heads} heads" if self.num_heads > 1 else ""),
                "precision": self.static.execution.precision, "maze_torso": torso, "weight_storage": self.weights.name,
                "target_values": self.targets.name, "backward": self.backward.name,
                "counted": self.counting.counted if self.uses_counts else "nothing (no part of the program counts)",
                **parts}

    def make_network(self, num_outputs: int):
        """A network of the Q-network's architecture with ``num_outputs`` outputs (parts' own networks: DORA's
        E-network, RND's), computing as the Q-network does: hidden layers in the compute precision from float32
        weights cast at each use, the output layer in float32, the maze's convolutions as Pallas kernels where
        the Q-network's are. In float32 this is the float32 network it always was."""
        return make_network(self.network_name, num_outputs, self.static.hidden, self.compute_dtype,
                            uses_pallas_torso(self.static, self.network_name))

    def init_variables(self, network, key: jax.Array, obs: jax.Array):
        """A part's ``network`` initialised on the batch ``obs``, drawn as ``--network-init`` says (every network
        of a program starts the same way)."""
        return init_variables(network, key, obs, self.static.network_init)

    @staticmethod
    def apply_flat(network, params, obs: jax.Array, lead_ndim: int) -> jax.Array:
        """``network`` on observations with ``lead_ndim`` leading axes, flattened into one batch and back."""
        lead = obs.shape[:lead_ndim]
        out = network.apply(params, obs.reshape((-1,) + obs.shape[lead_ndim:]))
        return out.reshape(lead + out.shape[1:])

    def sgd_step(self, params, opt_state, grads, lr: jax.Array):
        """One clipped RMSProp step of float32 ``params`` with the run's learning rate (the parts' networks)."""
        return sgd_step(self.optimiser, params, opt_state, grads, lr)

    @staticmethod
    def init_key(run_key: jax.Array, name: str) -> jax.Array:
        """A key of its own for the part state ``name`` of a run: from a stream apart from the acting, learning
        and environment keys, and never depending on which other parts the program has, so adding a part changes
        no other randomness."""
        base = jax.random.fold_in(run_key, 0xBA5E)
        slot = stream_slot(name)
        if slot is not None:
            return jax.random.split(base, STREAM_SLOTS)[slot]
        return jax.random.fold_in(base, zlib.crc32(name.encode()) & 0x7FFFFFFF)

    def forward_params(self, run: RunState):
        """What acting, the loss and the test episodes evaluate (the weight storage's)."""
        return self.weights.forward(run)

    def head_values(self, run: RunState, params, obs: jax.Array, cells: jax.Array | None = None) -> jax.Array:
        """``[B, K, A]``: what each head acts and bootstraps on (the network's values, adjusted by the parts);
        ``cells``: the cell ids of ``obs`` where the caller knows them (parts may look fixed values up by them)."""
        if cells is not None:
            chex.assert_shape(cells, (obs.shape[0],))
        q = self.q_network.apply(params, obs)
        q = q if self.num_heads > 1 else q[:, None, :]
        for part in self.parts:
            q = checked_output(part, "head_values", part.head_values(self, run, q, obs, cells), q.shape,
                               "[B, K, A]: what each head acts and bootstraps on")
        return q

    def batch_cells(self, batch: Batch, name: str) -> jax.Array | None:
        """The batch's cell ids ``name`` (``cells`` or ``next_cells``) where the stepping has a cell table, else
        None."""
        return getattr(batch, name) if self.stepping.has_cell_table else None

    def count_columns(self, run: RunState, key: jax.Array) -> jax.Array:
        """Where the state of count key ``key`` is counted (its sketch columns, for the paper's counting)."""
        return self.counting.columns(run, key)

    def metric_names(self) -> tuple[str, ...]:
        """The metrics ``train_chunk`` returns, in the order the results folder writes them."""
        diagnosed = self.stepping.records_diagnostics  # its diagnostics replace qplus_start, which says little there
        names = ["train_return", "episodes"] + (["test_return"] if self.stepping.has_test_episode else [])
        names += ["max_return", *self.stepping.visit_sizes, "q_start", *([] if diagnosed else ["qplus_start"]), "loss",
                  "epsilon", "intrinsic_reward", "nonfinite", *(DIAGNOSTIC_METRICS if diagnosed else ()),
                  *self.stepping.metric_names, *self.counting.metric_names]
        return tuple(names) + tuple(name for part in self.parts for name in part.metric_names)


def summed(values: list[jax.Array | None]) -> jax.Array | None:
    """The sum of the parts' contributions in their order (None where no part contributes)."""
    present = [v for v in values if v is not None]
    return functools.reduce(lambda a, b: a + b, present) if present else None


HOOK_SHAPES = {
    "action_bonus": "[E, A]: one bonus per environment of the run and action",
    "intrinsic_reward": "[B, n]: one reward per sampled step of each n-step window",
    "bootstrap_bonus": "[B, A]: one bonus per sampled window and action at its bootstrap state",
}
"""What the summed hooks return, as their shape errors say it."""


def contributions(agent: Agent, hook: str, shape: tuple[int, ...], *args) -> jax.Array | None:
    """The sum of every part's ``hook(agent, *args)``, each checked to have ``shape`` (None where none contributes)."""
    return summed([checked_output(part, hook, getattr(part, hook)(agent, *args), shape, HOOK_SHAPES[hook])
                   for part in agent.parts])


# ---------------------------------------------------------------------------------- init


def with_initial_weights(agent: Agent, run: RunState, params, key: jax.Array) -> RunState:
    """``run`` with the float32 weights ``params`` and a fresh optimiser, stored as the agent's storage keeps them."""
    return agent.weights.initial(run, params, key)


def learning_step(agent: Agent, run: RunState, grads, key: jax.Array, square_sums=None) -> RunState:
    """``run`` after one clipped RMSProp step of its Q-network on ``grads`` (``key``: packed storage's
    rounding; ``square_sums``: the lean backward pass's sums of squares of some of them)."""
    return agent.weights.step(run, grads, key, square_sums)


def with_target(agent: Agent, run: RunState, params) -> RunState:
    """``run`` with ``params`` as its target network, and what the target values read of it."""
    return agent.targets.copied(agent, run.replace(target_params=params))


def init_run(agent: Agent, run_key: jax.Array, env_key: jax.Array, hp: HParams, start: Any) -> RunState:
    """One run's initial state: networks, optimiser, environment, replay, counts, statistics, parts."""
    static, stepping = agent.static, agent.stepping
    k_net, k_hash, k_reset, k_loop = jax.random.split(run_key, 4)
    env = stepping.init_env(k_reset, env_key, start)
    obs = stepping.observations(env)[0]
    params = init_params(agent.q_network, k_net, obs, hp["final_bias"], static.head_init_scale,
                         static.network_init)
    run_counts = agent.counting.init(k_hash, env, agent.num_actions) if agent.uses_counts else None
    stats = RunStats(episode_return=jnp.zeros((agent.envs_per_run,), jnp.float32), chunk=ChunkStats.zeros(),
                     max_return=jnp.float32(-jnp.inf), visited=stepping.initial_visits(env, start),
                     nonfinite=jnp.bool_(False),
                     diagnostics=Diagnostics.zeros() if stepping.records_diagnostics else None)
    head = jax.random.randint(agent.init_key(run_key, "head"), (agent.envs_per_run,), 0, agent.num_heads)
    run = RunState(
        key=k_loop, hparams=hp, weights=None, target_params=None, env=env,
        memory=agent.replay.init(env, start), counts=run_counts, stats=stats, active_head=head, parts={},
    )
    run = with_initial_weights(agent, run, params, agent.init_key(run_key, "packing"))
    # traced for every program on a cell-table stepping; XLA drops it where no part's init reads it
    cell_obs = stepping.cell_table_obs(run) if stepping.has_cell_table else None
    example = Example(obs=obs, item=agent.replay.example_item(env), cell_obs=cell_obs)
    states = {part.name: part.init(agent, run_key, example) for part in agent.parts}
    run = run.replace(parts={name: state for name, state in states.items() if state is not None})
    return with_target(agent, run, agent.forward_params(run))


def init(agent: Agent, run_keys: jax.Array, env_keys: jax.Array, hparams: HParams, start: Any = None) -> TrainState:
    """Every run's initial state, stacked on a leading runs axis (see the module docstring)."""
    num_runs = run_keys.shape[0]
    chex.assert_tree_shape_prefix(hparams, (num_runs,))
    chex.assert_shape(env_keys, run_keys.shape)
    missing = sorted(set(agent.hparam_options) - set(hparams))
    if missing:
        raise ValueError(f"hyperparameters missing for this program: {', '.join(missing)}")
    shared, starts = agent.stepping.initial(start, num_runs)
    runs = jax.vmap(functools.partial(init_run, agent))(run_keys, env_keys, hparams, starts)
    return TrainState(step=jnp.int32(0), env=shared, runs=runs)


# ---------------------------------------------------------------------------------- acting


def linear_epsilon(step: jax.Array, start: jax.Array, end: jax.Array, decay_steps: jax.Array) -> jax.Array:
    """Linear decay from ``start`` to ``end`` over ``decay_steps`` environment steps, then ``end``.

    ``decay_steps <= 0`` means a fixed ``end``.
    """
    fraction = jnp.where(decay_steps > 0, jnp.clip(step / jnp.maximum(decay_steps, 1), 0.0, 1.0), 1.0)
    return start + (end - start) * fraction


def epsilon_at(agent: Agent, run: RunState, step: jax.Array) -> jax.Array:
    """Epsilon after ``step`` scan iterations (``step * envs_per_run`` environment steps of the run)."""
    hp = run.hparams
    return linear_epsilon(step * agent.envs_per_run, hp["epsilon_start"], hp["epsilon_end"], hp["epsilon_decay_steps"])


def action_values(agent: Agent, run: RunState, obs: jax.Array, columns: jax.Array | None) -> jax.Array:
    """``[E, A]``: the acting head's values plus every part's action bonus, in the states ``obs``."""
    values, _ = action_values_and_bonus(agent, run, obs, columns)
    return values


def action_values_and_bonus(agent: Agent, run: RunState, obs: jax.Array,
                            columns: jax.Array | None) -> tuple[jax.Array, jax.Array | None]:
    """:func:`action_values` and the parts' bonus in them (``[E, A]``, None where no part gives one)."""
    q = agent.head_values(run, agent.forward_params(run), obs)  # [E, K, A]
    q = jnp.take_along_axis(q, run.active_head[:, None, None], axis=1)[:, 0]
    n_sa = None
    if columns is not None:
        n_sa = jax.vmap(agent.counting.query_all, in_axes=(None, 0))(run.counts, columns)
    bonus = contributions(agent, "action_bonus", q.shape, run, obs, n_sa)
    return (q if bonus is None else q + bonus), bonus


def choose_actions(agent: Agent, run: RunState, step: jax.Array) -> tuple[RunState, Decision]:
    """Epsilon-greedy actions on the action values, with the counts as they are before this step."""
    key, k_explore, k_random, k_env = jax.random.split(run.key, 4)
    envs, stepping = agent.envs_per_run, agent.stepping
    before = stepping.count_keys(run.env)
    columns = jax.vmap(functools.partial(agent.count_columns, run))(before) if agent.uses_counts else None
    values, bonus = action_values_and_bonus(agent, run, stepping.observations(run.env), columns)
    greedy = jnp.argmax(values, axis=-1)
    explore = jax.random.uniform(k_explore, (envs,)) < epsilon_at(agent, run, step)
    actions = jnp.where(explore, jax.random.randint(k_random, (envs,), 0, agent.num_actions), greedy).astype(jnp.int32)
    chosen_bonus = None if bonus is None else jnp.take_along_axis(bonus, actions[:, None], axis=1)[:, 0]
    # a learned count's targets for the replay (its coin flips), from a key of their own: no other draw changes
    count_target = agent.counting.draw_targets(jax.random.fold_in(k_env, COUNT_TARGETS_STREAM), envs)
    return run.replace(key=key), Decision(actions=actions, columns=columns, before=before, env_key=k_env,
                                          bonus=chosen_bonus, count_target=count_target)


def record_step(agent: Agent, run: RunState, decision: Decision, outcome: Outcome) -> RunState:
    """Counts each real ``(s_t, a_t)``, stores the step, updates the statistics and lets the parts see it."""
    run_counts = counted(agent, run.counts, decision, outcome)
    memory, item = agent.replay.add(run, decision, outcome)
    stats = run.stats
    if stats.diagnostics is not None:
        stats = stats.replace(diagnostics=acted_diagnostics(agent, run, run_counts, decision, outcome))
    done = outcome.terminated | outcome.truncated
    episode_return = stats.episode_return + outcome.reward
    visited = {name: stats.visited[name].at[index].set(True)
               for name, index in agent.stepping.visits(run, decision, outcome).items()}
    stats = stats.replace(
        episode_return=jnp.where(done, 0.0, episode_return),
        chunk=stats.chunk.add_episodes(jnp.sum(jnp.where(done, episode_return, 0.0)), jnp.sum(done.astype(jnp.int32))),
        max_return=jnp.maximum(stats.max_return, jnp.max(jnp.where(done, episode_return, -jnp.inf))),
        visited=visited,
    )
    new_heads = jax.random.randint(jax.random.fold_in(decision.env_key, 1), (agent.envs_per_run,), 0, agent.num_heads)
    step = StepRecord(decision=decision, outcome=outcome, item=item)
    parts = {name: part_state for name, part_state in run.parts.items()}
    for part in agent.parts:
        if part.name in parts:
            parts[part.name] = checked_state(part, "after_step", parts[part.name], part.after_step(agent, run, step))
    return run.replace(memory=memory, counts=run_counts, stats=stats, parts=parts,
                       active_head=jnp.where(done, new_heads, run.active_head))


def counted(agent: Agent, run_counts: Any, decision: Decision, outcome: Outcome) -> Any:
    """The counts after a step: each real ``(s_t, a_t)`` of the run's environments added (where the program
    counts)."""
    return agent.counting.add(run_counts, decision, outcome) if agent.uses_counts else run_counts


def acted_diagnostics(agent: Agent, run: RunState, run_counts: Any, decision: Decision,
                      outcome: Outcome) -> Diagnostics:
    """The run's diagnostics with this step's acted (s, a) added: every part's intrinsic reward there, with the counts
    just after the step (what the stored transition earns if sampled now), and the bonus its choice saw."""
    envs = agent.envs_per_run
    acted = Batch(actions=decision.actions[:, None], rewards=jnp.zeros((envs, 1)),
                  terminated=outcome.terminated[:, None], included=jnp.ones((envs, 1), bool),
                  lazy=agent.replay.acted(decision, outcome))
    if run_counts is not None:
        acted.add_lazy(step_counts=lambda: jax.vmap(lambda cols, a: agent.counting.query(run_counts, cols, a))(
            decision.columns, decision.actions)[:, None])
    intrinsic = contributions(agent, "intrinsic_reward", (envs, 1), run, acted)
    intrinsic = jnp.zeros((envs,)) if intrinsic is None else intrinsic[:, 0]
    bonus = jnp.zeros((envs,)) if decision.bonus is None else decision.bonus
    return run.stats.diagnostics.add_acted(intrinsic, bonus, ~outcome.first)


# ---------------------------------------------------------------------------------- learning


def sample_batch(agent: Agent, run: RunState, key: jax.Array) -> Batch:
    """The replay's minibatch, with the counts the parts read at training time."""
    return with_counts(agent, run, agent.replay.sample(run, key))


def with_counts(agent: Agent, run: RunState, batch: Batch) -> Batch:
    """``batch`` with ``step_counts`` and ``next_counts`` read from the run's counts now (when the program counts)."""
    if agent.uses_counts:
        run_counts, counting = run.counts, agent.counting
        batch.add_lazy(
            step_counts=lambda: jax.vmap(jax.vmap(lambda cols, a: counting.query(run_counts, cols, a)))(
                batch.step_columns, batch.actions),
            next_counts=lambda: jax.vmap(lambda cols: counting.query_all(run_counts, cols))(batch.next_columns),
        )
    return batch


def targets_for(agent: Agent, run: RunState, batch: Batch) -> tuple[jax.Array, jax.Array]:
    """``[B, K]`` n-step targets per head, with the parts' intrinsic rewards recomputed now; and those rewards."""
    hp = run.hparams
    intrinsic = contributions(agent, "intrinsic_reward", batch.rewards.shape, run, batch)
    intrinsic = jnp.zeros_like(batch.rewards) if intrinsic is None else intrinsic
    partial, discount, _ = jax.vmap(n_step_return, in_axes=(0, 0, 0, None))(
        batch.rewards + intrinsic, batch.terminated, batch.included, agent.static.gamma
    )
    q_next = agent.targets.next_values(agent, run, batch)  # [B, K, A]
    bonus = contributions(agent, "bootstrap_bonus", (batch.rewards.shape[0], agent.num_actions), run, batch)
    values = jnp.max(q_next, axis=-1) if bonus is None else bootstrap_value(
        q_next, jnp.broadcast_to(bonus[:, None, :], q_next.shape))
    targets = partial[:, None] + discount[:, None] * values
    if batch.mc_return is not None:
        n_step_only = targets
        targets = mixed_monte_carlo(targets, batch.mc_return[:, None], hp["beta_mmc"])
        if agent.static.mmc_unfinished == "n_step":  # the n-step target alone until the episode's return is known
            targets = jnp.where(batch.mc_known[:, None], targets, n_step_only)
    return targets, intrinsic


def taken_values(q: jax.Array, actions: jax.Array) -> jax.Array:
    """``[B, K]``: each head's value of the action taken in each row (``q``: ``[B, K, A]``, ``actions``: ``[B]``)."""
    return jnp.take_along_axis(q, jnp.broadcast_to(actions[:, None, None], q.shape[:2] + (1,)), axis=2)[..., 0]


def td_loss_per_head(params, agent: Agent, run: RunState, batch: Batch, targets: jax.Array) -> jax.Array:
    """Sum over heads of each head's mean squared TD error (every head learns from every sample)."""
    q = agent.head_values(run, params, batch.obs, agent.batch_cells(batch, "cells"))  # [B, K, A]
    actions = batch.actions[:, 0]
    q_taken = taken_values(q, actions)
    if batch.weights is None:
        return agent.num_heads * td_loss(q_taken, targets)
    errors = jnp.square(q_taken - jax.lax.stop_gradient(targets)) * batch.weights[:, None]
    return jnp.sum(errors) / jnp.maximum(jnp.sum(batch.weights), 1.0)


def loss_and_gradients(agent: Agent, run: RunState, batch: Batch, targets: jax.Array):
    """``(loss, grads, square_sums)``: the TD loss and its gradients in the forward passes' weights; with the
    lean backward pass also the square sums of the kernels' gradients (:mod:`mlp_backward`), else None."""
    return agent.backward.value_and_grad(td_loss_per_head, agent.forward_params(run), agent, run, batch, targets)


def update(agent: Agent, run: RunState) -> RunState:
    """One learning step: the Q-network on a sampled minibatch, then every part on the same minibatch."""
    key, k_q = jax.random.split(run.key)
    with jax.named_scope("sample"):
        batch = sample_batch(agent, run, k_q)
    with jax.named_scope("targets"):
        targets, intrinsic = targets_for(agent, run, batch)
    with jax.named_scope("loss_and_grad"):
        loss, grads, square_sums = loss_and_gradients(agent, run, batch, targets)
        for part in agent.parts:
            grads = checked_state(part, "scale_gradients", grads, part.scale_gradients(agent, grads))
    with jax.named_scope("optimiser"):
        learned = learning_step(agent, run, grads, jax.random.fold_in(k_q, PACKING_STREAM), square_sums)
    stats = run.stats.replace(chunk=run.stats.chunk.add_update(loss / agent.num_heads, jnp.mean(intrinsic[:, 0])))
    # the sampled rows' values as the loss saw them, once, for the diagnostics and a prioritised replay alike
    q = sampled_values(agent, run, batch) if stats.diagnostics is not None or agent.replay.writes_priorities else None
    if stats.diagnostics is not None:
        stats = stats.replace(diagnostics=sampled_diagnostics(agent, run, batch, targets, q))
    if agent.replay.writes_priorities:  # a prioritised replay: the rows' TD errors, written back
        learned = learned.replace(memory=agent.replay.prioritised(run, batch, row_td_errors(q, batch, targets)))
    if agent.uses_counts and agent.counting.learns:  # a learned count: a step on the same minibatch
        with jax.named_scope("counts"):
            learned = learned.replace(counts=agent.counting.learn(run, batch, jax.random.fold_in(k_q, COUNT_STREAM)))
    parts, updating = dict(run.parts), [p for p in agent.parts if type(p).update is not Part.update]
    for j, part in enumerate(updating):  # each part learns from the run as it was sampled, with a key of its own
        with jax.named_scope(part.name):
            parts[part.name] = checked_state(part, "update", run.parts.get(part.name),
                                             part.update(agent, run, batch, jax.random.fold_in(k_q, 1 + j)))
    return learned.replace(key=key, stats=stats, parts=parts)


def sampled_values(agent: Agent, run: RunState, batch: Batch) -> jax.Array:
    """``[B, K, A]``: every head's values at the sampled states under the weights the loss read."""
    return agent.head_values(run, agent.forward_params(run), batch.obs, agent.batch_cells(batch, "cells"))


def row_td_errors(q: jax.Array, batch: Batch, targets: jax.Array) -> jax.Array:
    """``float32[B]``: each sampled row's absolute TD error under the values ``q`` (:func:`sampled_values`), the mean
    over heads."""
    errors = jnp.mean(jnp.abs(taken_values(q, batch.actions[:, 0]) - targets), axis=1).astype(jnp.float32)
    chex.assert_shape(errors, batch.actions.shape[:1])
    return errors


def sampled_diagnostics(agent: Agent, run: RunState, batch: Batch, targets: jax.Array, q: jax.Array) -> Diagnostics:
    """The run's diagnostics with one update added: over its valid rows, the largest TD error and |Q| (``q``, the
    online network as the loss saw it, every head: :func:`sampled_values`), the mean action bonus of the sampled
    (s_t, a_t) with the counts now, and the share of rows whose Monte Carlo return is not known yet."""
    valid = batch.weights > 0 if batch.weights is not None else jnp.ones(q.shape[:1], bool)
    actions = batch.actions[:, 0]
    q_taken = taken_values(q, actions)
    td_max = jnp.max(jnp.where(valid[:, None], jnp.abs(q_taken - targets), 0.0))
    q_max = jnp.max(jnp.where(valid[:, None, None], jnp.abs(q), 0.0))
    n_sa = None
    if agent.uses_counts:
        n_sa = jax.vmap(lambda cols: agent.counting.query_all(run.counts, cols))(batch.step_columns[:, 0])
    bonus = contributions(agent, "action_bonus", (q.shape[0], agent.num_actions), run, batch.obs, n_sa)
    taken_bonus = jnp.zeros(actions.shape) if bonus is None else jnp.take_along_axis(bonus, actions[:, None], 1)[:, 0]
    rows = jnp.maximum(jnp.sum(valid), 1)
    unknown = jnp.zeros(actions.shape, bool) if batch.mc_known is None else ~batch.mc_known
    return run.stats.diagnostics.add_update(td_max, q_max, jnp.sum(jnp.where(valid, taken_bonus, 0.0)) / rows,
                                            jnp.sum(valid & unknown) / rows)


def copy_target(agent: Agent, run: RunState) -> RunState:
    return with_target(agent, run, agent.forward_params(run))


# ---------------------------------------------------------------------------------- the scan


def due_to_train(agent: Agent, iterations: jax.Array) -> jax.Array:
    """Whether updates are due after ``iterations`` scan steps: one per ``train_every`` environment steps per run,
    once the replay holds more than a batch."""
    static, envs = agent.static, agent.envs_per_run
    iterations_per_update = max(1, static.train_every // envs)
    return (iterations * envs > static.batch_size) & (iterations % iterations_per_update == 0)


def train_runs(agent: Agent, runs: RunState) -> RunState:
    """The updates of one scan step (several when a run steps more environments than ``train_every``)."""
    for _ in range(max(1, agent.envs_per_run // agent.static.train_every)):
        runs = jax.vmap(functools.partial(update, agent))(runs)
    return runs


def train_if_due(agent: Agent, runs: RunState, iterations: jax.Array) -> RunState:
    """The updates due after ``iterations`` scan steps (:func:`due_to_train`)."""
    return jax.lax.cond(due_to_train(agent, iterations), functools.partial(train_runs, agent), lambda r: r, runs)


def record_all(agent: Agent, runs: RunState, decision: Decision, outcome: Outcome) -> RunState:
    """Every run records its step, then the replay does what follows a step (a frame ring fills Monte Carlo
    returns)."""
    runs = jax.vmap(functools.partial(record_step, agent))(runs, decision, outcome)
    return agent.replay.settle(runs, outcome)


def due_to_copy(agent: Agent, stored: jax.Array) -> jax.Array:
    """Whether the target network is copied after ``stored`` scan steps (every ``target_update`` env steps)."""
    return (stored * agent.envs_per_run) % agent.static.target_update == 0


def copy_target_if_due(agent: Agent, runs: RunState, stored: jax.Array) -> RunState:
    with jax.named_scope("target_copy"):
        return jax.lax.cond(due_to_copy(agent, stored), jax.vmap(functools.partial(copy_target, agent)), lambda r: r,
                            runs)


def act_and_record(agent: Agent, state: TrainState) -> tuple[Any, RunState]:
    """Every run chooses its action, its environment steps, and the step is counted and stored."""
    runs, decision = jax.vmap(functools.partial(choose_actions, agent), in_axes=(0, None))(state.runs, state.step)
    shared, runs, outcome = agent.stepping.step(state.env, runs, decision)
    return shared, record_all(agent, runs, decision, outcome)


def env_step(agent: Agent, state: TrainState, _) -> tuple[TrainState, None]:
    """One environment step of every run in the strict order: act, step, count and store, train, copy the target."""
    # the named scopes label the compiled ops in a device profile (docs/performance.md; no effect on the results)
    with jax.named_scope("act"):
        shared, runs = act_and_record(agent, state)
    stored = state.step + 1
    with jax.named_scope("update"):
        runs = train_if_due(agent, runs, stored)
    return TrainState(step=stored, env=shared, runs=copy_target_if_due(agent, runs, stored)), None


def overlapped_step(agent: Agent, carry: tuple, _) -> tuple[tuple, None]:
    """One environment step of every run while learning: the update runs while the emulators step.

    The previous step's outcome, ``pending``, is recorded first, so the replay is written before the update
    reads it within an iteration. Reading it first and writing it after the emulators answer would make XLA
    copy the whole frame ring at every step (it cannot prove the read comes first). The update sees the replay
    and counts as they were before this step (one step late), as acting does not wait for it.
    """
    state, (pending_decision, pending_outcome, has_pending) = carry
    stepping = agent.stepping
    with jax.named_scope("act"):
        runs = jax.lax.cond(has_pending, lambda r: record_all(agent, r, pending_decision, pending_outcome),
                            lambda r: r, state.runs)
        runs, decision = jax.vmap(functools.partial(choose_actions, agent), in_axes=(0, None))(runs, state.step)
        shared = stepping.send(state.env, decision)
        runs, shared = jax.lax.optimization_barrier((runs, shared))  # pin the update between send and receive
    with jax.named_scope("update"):
        # the updates due after state.step steps, on the replay that holds them; those of the step in flight are made
        # at the next iteration: a lag of E environment steps, the replay ratio unchanged (tests/test_schedules.py)
        runs = train_if_due(agent, runs, state.step)
    with jax.named_scope("act"):
        runs, shared = jax.lax.optimization_barrier((runs, shared))
        shared, runs, outcome = stepping.receive(shared, runs)
    stored = state.step + 1
    state = TrainState(step=stored, env=shared, runs=copy_target_if_due(agent, runs, stored))
    return (state, (decision, outcome, jnp.bool_(True))), None


def overlapped_steps(agent: Agent, state: TrainState, length: int) -> TrainState:
    """``length`` overlapped steps, the last one's outcome recorded at the end (so a chunk's metrics hold it)."""

    def first_step(s: TrainState):
        runs, decision = jax.vmap(functools.partial(choose_actions, agent), in_axes=(0, None))(s.runs, s.step)
        return decision, agent.stepping.step(s.env, runs, decision)[2]

    decision, outcome = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(first_step, state))
    carry = (state, (decision, outcome, jnp.bool_(False)))
    state, (decision, outcome, _) = jax.lax.scan(functools.partial(overlapped_step, agent), carry, None,
                                                 length=length)[0]
    return state.replace(runs=record_all(agent, state.runs, decision, outcome))


# ---------------------------------------------------------------------------------- metrics


def majority_vote(q_heads: jax.Array) -> jax.Array:
    """The action most heads rank first (``q_heads``: ``[K, A]``); ties go to the lowest action index."""
    chex.assert_rank(q_heads, 2)
    votes = jnp.sum(jax.nn.one_hot(jnp.argmax(q_heads, axis=-1), q_heads.shape[-1]), axis=0)
    return jnp.argmax(votes).astype(jnp.int32)


def chunk_metrics(agent: Agent, run: RunState, step: jax.Array) -> tuple[RunState, dict[str, jax.Array]]:
    """The chunk's metrics of one run (:data:`METRIC_DOCS`); resets the chunk's sums."""
    stepping, stats, key = agent.stepping, run.stats, run.key
    metrics = stats.chunk.means()
    if stepping.has_test_episode:  # the paper's test protocol: greedy on plain Q, with keys of its own
        key, k_reset, k_steps = jax.random.split(run.key, 3)
        vote = lambda obs: majority_vote(agent.head_values(run, agent.forward_params(run), obs[None])[0])  # noqa: E731
        metrics["test_return"] = stepping.test_return(run, vote, k_reset, k_steps)
    start_obs, start_key = stepping.start_state(run)
    q0 = jnp.mean(agent.head_values(run, agent.forward_params(run), start_obs[None])[0], axis=0)
    n0 = None
    if agent.uses_counts:
        n0 = agent.counting.query_all(run.counts, agent.count_columns(run, start_key))[None]
    bonus = contributions(agent, "action_bonus", (1, agent.num_actions), run, start_obs[None], n0)
    nonfinite = (stats.nonfinite | ~jnp.isfinite(stats.chunk.loss_sum) | ~jnp.all(jnp.isfinite(q0))
                 | ~all_finite(agent.weights.master(run)))
    if agent.uses_counts and agent.counting.learns:  # a learned count gone NaN stops its run as a NaN loss does
        nonfinite = nonfinite | ~all_finite(run.counts)
    metrics.update({
        "max_return": jnp.where(jnp.isfinite(stats.max_return), stats.max_return, jnp.nan),
        **{name: jnp.sum(seen).astype(jnp.float32) for name, seen in stats.visited.items()},
        "q_start": jnp.max(q0),
        "qplus_start": jnp.max(q0 if bonus is None else q0 + bonus[0]),
        "epsilon": epsilon_at(agent, run, step),
        "nonfinite": nonfinite.astype(jnp.float32),
        **agent.counting.metrics(run),  # before the stepping's: the programs trace as when the stepping had both
        **stepping.metrics(run),
    })
    for part in agent.parts:
        metrics.update(checked_metrics(part, part.metrics(agent, run)))
    if stats.diagnostics is not None:
        metrics.update(stats.diagnostics.means())
        stats = stats.replace(diagnostics=Diagnostics.zeros())
    run = run.replace(key=key, stats=stats.replace(chunk=ChunkStats.zeros(), nonfinite=nonfinite))
    return run, {name: metrics[name] for name in agent.metric_names()}


def train_chunk(agent: Agent, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """``log_every`` environment steps of every run, then every run's metrics."""
    length = agent.static.log_every // agent.envs_per_run
    if agent.stepping.overlaps:
        state = overlapped_steps(agent, state, length)
    else:
        state, _ = jax.lax.scan(functools.partial(env_step, agent), state, None, length=length)
    return with_chunk_metrics(agent, state)


def with_chunk_metrics(agent: Agent, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """Every run's metrics of the chunk that ``state`` ends (:func:`chunk_metrics`), its sums reset."""
    with jax.named_scope("metrics"):
        runs, metrics = jax.vmap(functools.partial(chunk_metrics, agent), in_axes=(0, None))(state.runs, state.step)
    return state.replace(runs=runs), metrics


@dataclasses.dataclass(frozen=True)
class Trainer:
    """The compiled experiment's pure functions and what they were built from."""

    static: StaticConfig
    agent: Agent
    init: Callable[..., TrainState]
    train_chunk: Callable[[TrainState], tuple[TrainState, dict[str, jax.Array]]]
    metric_names: tuple[str, ...]

    @property
    def stepping(self):
        return self.agent.stepping

    @property
    def network(self):
        return self.agent.q_network

    def action_values(self, run: RunState, obs: jax.Array) -> jax.Array:
        """``[E, A]``: what one run acts greedily on in ``obs`` (``[E, *obs_shape]``), counts as they are."""
        agent = self.agent
        columns = None
        if agent.uses_counts:
            columns = jax.vmap(functools.partial(agent.count_columns, run))(agent.stepping.count_keys(run.env))
        return action_values(agent, run, obs, columns)


def make_train(static: StaticConfig, env: Any = None) -> Trainer:
    """Builds the pure ``init`` and ``train_chunk`` functions of one experiment (``env``: see :func:`make_stepping`)."""
    static.validate()
    agent = Agent(static, make_stepping(static, env))
    return Trainer(static=static, agent=agent, init=functools.partial(init, agent),
                   train_chunk=functools.partial(train_chunk, agent), metric_names=agent.metric_names())


__all__ = ["Agent", "ChunkStats", "METRIC_DOCS", "RunState", "TrainState", "Trainer", "make_optimiser", "make_train"]
