"""Any environment that speaks gymnax's API behind the interface the opiq-jax trainer uses.

``GymnaxAdapter(env, params)`` wraps an environment *object*: one of gymnax's, navix's ``ToGymnax``, or your own
with ``reset(key, params) -> (obs, state)``, ``step(key, state, action, params)``, ``action_space(params)`` (discrete)
and ``default_params``. :func:`make_gymnax` is the separate name lookup: ``make_gymnax("DeepSea-bsuite", size=20)``
builds ``gymnax.make(name)`` and wraps it. The adapter adds what the trainer needs on top of the API (see
``envs/chain.py`` for the reference semantics):

* ``reset(key, params) -> (obs, state)`` and ``step(key, state, action, params) -> (obs, state, reward, terminated,
  truncated, info)`` with auto-reset, the observation cast to ``float32``. ``info["compact"]`` is the flattened
  observation *before* any auto-reset and ``info["cell_id"]`` its cell id.
* **Both step conventions.** gymnax from 1.0 returns 6 values (terminated and truncated apart) and resets on its
  own, putting the observation before the reset in ``info["final_observation"]``: the adapter then calls ``step``
  and nothing else, so it is step for step ``gymnax.make``'s environment. An environment without that entry (5
  values ``obs, state, reward, done, info`` as gymnax before 1.0 and navix's ``ToGymnax``, or 6 values without it)
  is taken to return the observation reached, which ends the episode when ``done`` (navix resets lazily, on the
  next call): the adapter then resets it with its own ``reset`` under a key split from the step's, so a finished
  episode is never stepped again. Of 5 values, ``done`` is a termination unless ``info["truncated"]`` says it
  was the time limit.
* The compact state of a transition is the flattened ``float32`` observation: the adapter state carries the
  observation it last returned, so ``compact_state(state)`` is exact for every environment, and
  ``obs_from_compact(compact, params)`` just reshapes it. Replay then stores ``2 * prod(obs_shape)`` floats per
  transition (DeepSea N=40: 12.8 kB).
* ``cell_id(compact)`` for "distinct states visited" and exact counts: the environment's own where it has one
  (``num_cells`` and ``cell_id``, as :class:`PerRunActionMapping` gives DeepSea: ``row * N + column``, ``N * N``
  after the last row); else, where it reads one from its *state* (``num_cells`` and ``state_cell(env_state)``, as
  MiniGrid's agent, pocket and doors), that id, carried as one more ``float32`` after the observation in the
  compact state (exact below 2**24, :data:`MAX_STATE_CELLS`); otherwise a 16-bit hash of the observation's bytes
  (``num_cells = 2**16``), an approximate count (collisions merge states; continuous observations make almost
  every state distinct).
* Per-run parameters: an environment with ``sample_params(key, params)`` draws each run's (DeepSea's action
  mapping); any other gives every run ``params``, its randomness coming from the reset and step keys.
* No cell table (``has_cell_table`` False): the trainer counts these environments by hashing the observation
  each time.

:func:`make_gymnax` routes keyword arguments by name: a constructor argument of the gymnax class (DeepSea's
``size``; an ``int`` for an argument whose name ends in ``key`` becomes ``jax.random.key(int)``) or a field of its
``EnvParams`` (``max_steps_in_episode``, DeepSea's ``deterministic``, ...). A name that is both goes to the
constructor. Unknown names, unknown environments, continuous action spaces and missing Python packages fail with a
one-line ``ValueError``/``ImportError``.

DeepSea's action mapping. gymnax draws the mapping (which action moves right in each cell) once, at construction,
from ``action_mapping_key`` (default ``key(0)``), and copies it into the state at every reset; so every run built
from one environment object would share it. :class:`PerRunActionMapping`, the wrapper :func:`make_gymnax` puts
around DeepSea, makes the mapping a params field instead (:class:`DeepSeaRunParams`, ``action_mapping:
int32[N, N]``) and writes it into the wrapped state after every ``reset`` and ``step``: its default params hold
gymnax's own mapping (so with them the adapter is step-for-step identical to ``gymnax.make``), and
``sample_params(key, params)`` draws a fresh Bernoulli(1/2) mapping from ``key``, so each run gets its own, as the
chain's flips. gymnax's switches keep their meaning: ``randomize_actions=False`` uses the all-ones mapping and
``sample_action_map=True`` keeps gymnax's per-episode mapping drawn from the reset key.

Horizons: the trainer scans ``int(default_params.max_steps_in_episode)`` steps for each greedy test episode. Most
gymnax environments use 100-1000 (DeepSea: N); Freeway-MinAtar uses 2500 and MountainCarContinuous 999 (continuous
actions are refused anyway). Pass ``max_steps_in_episode`` to shorten it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .base import CompactEnvironment
from .hashing import mix32

# Distinct cell ids of environments other than DeepSea: the observation hashed into 16 bits.
HASH_CELLS = 1 << 16

# The most cells a state's own id may take: it rides in the float32 compact state, exact for integers to 2**24.
MAX_STATE_CELLS = 1 << 24

# The reset key of ``start_compact`` for environments with a random start (a fixed, named constant:
# q_start/qplus_start are then measured at one reproducible start state for every run).
START_STATE_SEED = 0x0510

# Python modules that gymnax environments import lazily, and the pip package that provides each.
PIP_NAMES = {
    "absl": "absl-py",
    "brax": "brax",
    "bsuite": "bsuite",
    "cv2": "opencv-python",
    "evojax": "evojax",
    "gymnasium": "gymnasium",
    "matplotlib": "matplotlib",
    "minatar": "minatar",
    "PIL": "pillow",
    "seaborn": "seaborn",
    "six": "six",
    "sklearn": "scikit-learn",
}


def _missing_package(error: ModuleNotFoundError, what: str) -> ImportError:
    module = (error.name or str(error)).split(".")[0]
    package = PIP_NAMES.get(module, module)
    return ImportError(f"{what} needs the Python package {package!r}, which is not installed: pip install {package}")


try:  # gymnax imports every environment module on import (and six, which it does not declare)
    import gymnax
    from gymnax import registration
    from gymnax.environments import spaces
    from gymnax.environments.bsuite import deep_sea
except ModuleNotFoundError as _error:
    raise _missing_package(_error, "gymnax") from None


@struct.dataclass
class DeepSeaRunParams(deep_sea.EnvParams):
    """gymnax's DeepSea params plus ``action_mapping`` (int32[N, N]: the action that moves right in
    each cell), so that each run can have its own mapping."""

    action_mapping: jax.Array = None


@struct.dataclass
class AdapterState:
    """The wrapped environment's state plus the observation it last returned (flattened)."""

    env_state: Any
    compact: jax.Array  # float32[prod(obs_shape)]


class PerRunActionMapping:
    """gymnax's DeepSea with its action mapping a params field, drawn per run (module docstring), and its cells
    counted exactly."""

    def __init__(self, env: deep_sea.DeepSea):
        self.env = env
        self.size = env.size

    def params_of(self, params: deep_sea.EnvParams) -> DeepSeaRunParams:
        """``params`` with gymnax's own mapping as ``action_mapping``."""
        fields = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
        return DeepSeaRunParams(**fields, action_mapping=jnp.asarray(self.env.action_mapping, jnp.int32))

    @property
    def default_params(self) -> DeepSeaRunParams:
        return self.params_of(self.env.default_params)

    def sample_params(self, key: jax.Array, params: DeepSeaRunParams) -> DeepSeaRunParams:
        mapping = jax.random.bernoulli(key, 0.5, (self.size, self.size)).astype(jnp.int32)
        return params.replace(action_mapping=mapping)

    def with_mapping(self, env_state, params: DeepSeaRunParams):
        fixed = jnp.where(params.randomize_actions, params.action_mapping, jnp.ones((self.size, self.size), jnp.int32))
        mapping = jnp.where(params.sample_action_map, env_state.action_mapping, fixed)
        return env_state.replace(action_mapping=mapping.astype(jnp.int32))

    def reset(self, key: jax.Array, params: DeepSeaRunParams):
        obs, env_state = self.env.reset(key, params)
        return obs, self.with_mapping(env_state, params)

    def step(self, key: jax.Array, env_state, action, params: DeepSeaRunParams):
        obs, env_state, *rest = self.env.step(key, env_state, action, params)
        return (obs, self.with_mapping(env_state, params), *rest)

    def action_space(self, params=None):
        return self.env.action_space(params)

    def observation_space(self, params):
        return self.env.observation_space(params)

    @property
    def num_cells(self) -> int:
        return self.size * self.size + 1

    def cell_id(self, compact: jax.Array) -> jax.Array:
        """``row * N + column`` of the one-hot observation; ``N * N`` for the empty one after the last row."""
        return jnp.where(jnp.max(compact) > 0, jnp.argmax(compact), self.size * self.size).astype(jnp.int32)


def _constructor_arguments(factory) -> list[str]:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in signature.parameters.values() if p.kind in kinds and p.name != "self"]


def make_gymnax(name: str, **kwargs: Any) -> GymnaxAdapter:
    """The registered gymnax environment ``name`` built with ``kwargs`` (routed by name, module docstring) and
    adapted; DeepSea inside :class:`PerRunActionMapping`."""
    if name not in gymnax.registered_envs:
        raise ValueError(f"unknown gymnax environment {name!r}; registered: {', '.join(gymnax.registered_envs)}")
    ctor_names = _constructor_arguments(registration._registry[name])
    ctor_kwargs = {k: v for k, v in kwargs.items() if k in ctor_names}
    for k, v in ctor_kwargs.items():
        if k.endswith("key") and isinstance(v, int) and not isinstance(v, bool):
            ctor_kwargs[k] = jax.random.key(v)
    try:
        env, params = gymnax.make(name, **ctor_kwargs)
    except ModuleNotFoundError as e:
        raise _missing_package(e, f"gymnax:{name}") from None
    except (TypeError, ValueError, OSError) as e:
        detail = " ".join(str(e).split())
        raise ValueError(f"gymnax:{name} could not be built with {ctor_kwargs or 'its defaults'}: {detail}") from None
    field_names = [f.name for f in dataclasses.fields(params)]
    unknown = sorted(set(kwargs) - set(ctor_names) - set(field_names))
    if unknown:
        raise ValueError(
            f"unknown argument(s) {', '.join(unknown)} for gymnax:{name}; constructor arguments: "
            f"{', '.join(ctor_names) or 'none'}; EnvParams fields: {', '.join(field_names)}"
        )
    params = params.replace(**{k: v for k, v in kwargs.items() if k not in ctor_names})
    if isinstance(env, deep_sea.DeepSea):
        env = PerRunActionMapping(env)
        params = env.params_of(params)
    return GymnaxAdapter(env, params, name=name, kwargs=kwargs)


def _step_convention(env: Any, params: Any, state: Any) -> tuple[int, bool]:
    """How many values ``env.step`` returns (5 or 6), and whether it resets on its own (its info holds the
    observation before the reset, ``final_observation``), from the shapes of one step."""
    out = jax.eval_shape(lambda k, s: env.step(k, s, jnp.int32(0), params), jax.random.key(0), state)
    if len(out) not in (5, 6) or not isinstance(out[-1], Mapping):
        raise ValueError(f"{type(env).__name__}.step returns {len(out)} values; an environment with gymnax's API "
                         "returns obs, state, reward, done, info (5) or obs, state, reward, terminated, truncated, "
                         "info (6)")
    return len(out), "final_observation" in out[-1]


def _split_done(done: jax.Array, info: Mapping[str, Any]) -> tuple[jax.Array, jax.Array]:
    """terminated, truncated of a 5-value step: ``done`` is a termination unless ``info["truncated"]`` says so."""
    done = jnp.asarray(done, bool)
    truncated = done & jnp.asarray(info["truncated"], bool) if "truncated" in info else jnp.zeros_like(done)
    return done & ~truncated, truncated


class GymnaxAdapter(CompactEnvironment):
    """An environment object with gymnax's API, with the compact-state interface of the opiq-jax trainer."""

    def __init__(self, env: Any, params: Any = None, *, name: str | None = None, kwargs: Mapping | None = None):
        super().__init__()
        params = env.default_params if params is None else params
        self.env = env
        self.env_name = name or type(env).__name__
        self.kwargs = dict(kwargs or {})
        action_space = env.action_space(params)
        if not hasattr(action_space, "n") or getattr(action_space, "shape", ()) != ():
            raise ValueError(
                f"{self.label} has a continuous action space ({type(action_space).__name__}); "
                "OPIQ and its DQN baselines need discrete actions"
            )
        self._default_params = params
        obs, state = jax.eval_shape(lambda k: env.reset(k, params), jax.random.key(START_STATE_SEED))  # shapes only
        self.step_values, self.resets_itself = _step_convention(env, params, state)
        self.obs_shape = tuple(obs.shape)
        self.obs_dim = int(np.prod(self.obs_shape))
        self._num_actions = int(action_space.n)
        self._action_space = action_space
        self.own_cells = hasattr(env, "cell_id") and hasattr(env, "num_cells")
        self.state_cells = not self.own_cells and hasattr(env, "state_cell") and hasattr(env, "num_cells")
        if self.state_cells and (self.resets_itself or int(env.num_cells) > MAX_STATE_CELLS):
            raise ValueError(f"{self.label}: a state's own cell id needs an environment that does not reset itself "
                             f"(the adapter reads the state before the reset) and at most {MAX_STATE_CELLS} cells, "
                             f"got {int(env.num_cells)}")
        self.compact_dim = self.obs_dim + int(self.state_cells)

    # ------------------------------------------------------------------ sizes
    @property
    def name(self) -> str:
        return self.env_name

    @property
    def label(self) -> str:
        """How messages name it: ``gymnax:NAME`` for a registered gymnax environment, else its name."""
        return f"gymnax:{self.env_name}" if self.env_name in gymnax.registered_envs else self.env_name

    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def num_cells(self) -> int:
        """Size of the cell-id space: the environment's own (DeepSea: N * N + 1; MiniGrid's states; exact), else
        2**16 hash buckets."""
        return int(self.env.num_cells) if self.own_cells or self.state_cells else HASH_CELLS

    # ----------------------------------------------------------------- params
    @property
    def default_params(self):
        """The wrapped environment's params (with :func:`make_gymnax`'s keyword arguments applied)."""
        return self._default_params

    def sample_params(self, key: jax.Array):
        """One run's params: the environment's own draw where it has one (DeepSea's action mapping), else
        ``default_params``."""
        if hasattr(self.env, "sample_params"):
            return self.env.sample_params(key, self._default_params)
        return self._default_params

    # ---------------------------------------------------------------- dynamics
    def flatten(self, obs: jax.Array, env_state: Any) -> jax.Array:
        """float32[compact_dim]: an observation as a compact state, with its state's own cell id after it where the
        environment reads one."""
        flat = jnp.reshape(obs, (self.obs_dim,)).astype(jnp.float32)
        if not self.state_cells:
            return flat
        return jnp.concatenate([flat, jnp.asarray(self.env.state_cell(env_state), jnp.float32)[None]])

    def reset(self, key: jax.Array, params=None) -> tuple[jax.Array, AdapterState]:
        """The wrapped ``reset``; the observation as float32."""
        params = self._default_params if params is None else params
        obs, env_state = self.env.reset(key, params)
        compact = self.flatten(obs, env_state)
        return self.obs_from_compact(compact, params), AdapterState(env_state, compact)

    def step(self, key: jax.Array, state: AdapterState, action, params=None):
        """One step with auto-reset (module docstring: either convention). ``info`` adds ``compact``/``cell_id``
        of the state reached *before* any auto-reset."""
        params = self._default_params if params is None else params
        action = jnp.asarray(action, jnp.int32)
        if self.resets_itself:
            obs, env_state, reward, terminated, truncated, info = self.env.step(key, state.env_state, action, params)
            final, final_state = info["final_observation"], None  # no state cells here: the state is reset
        else:
            (obs, final, env_state, final_state, reward, terminated, truncated,
             info) = self._step_then_reset(key, state, action, params)
        final, compact = self.flatten(final, final_state), self.flatten(obs, env_state)
        info = {**info, "compact": final, "cell_id": self.cell_id(final)}
        return (
            self.obs_from_compact(compact, params),
            AdapterState(env_state, compact),
            jnp.asarray(reward, jnp.float32),
            jnp.asarray(terminated, bool),
            jnp.asarray(truncated, bool),
            info,
        )

    def step_in_episode(self, key: jax.Array, state: AdapterState, action, params=None):
        """:meth:`step` without its reset where the wrapped environment does not reset itself (base class: for the
        test episode). The step draws on the same half of ``key`` as :meth:`step`'s, so the episode is the same."""
        if self.resets_itself:  # its own step resets: nothing to skip
            return super().step_in_episode(key, state, action, params)
        params = self._default_params if params is None else params
        action = jnp.asarray(action, jnp.int32)
        obs, env_state, reward, terminated, truncated, _ = self._own_step(jax.random.split(key)[0], state, action,
                                                                          params)
        compact = self.flatten(obs, env_state)
        return (self.obs_from_compact(compact, params), AdapterState(env_state, compact),
                jnp.asarray(reward, jnp.float32), terminated, truncated)

    def _own_step(self, key: jax.Array, state: AdapterState, action: jax.Array, params):
        """The wrapped environment's step, in either convention, as ``(obs, env_state, reward, terminated,
        truncated, info)`` with boolean ends."""
        out = self.env.step(key, state.env_state, action, params)
        if self.step_values == 5:
            obs, env_state, reward, done, info = out
            terminated, truncated = _split_done(done, info)
        else:
            obs, env_state, reward, terminated, truncated, info = out
        return obs, env_state, reward, jnp.asarray(terminated, bool), jnp.asarray(truncated, bool), info

    def _step_then_reset(self, key: jax.Array, state: AdapterState, action: jax.Array, params):
        """An environment that does not reset on its own: its step, then its reset where the episode ended. Returns
        the observation after any reset, the step's own observation (before it), the state after any reset, the
        step's own state, then reward, terminated, truncated and info."""
        key_step, key_reset = jax.random.split(key)
        obs, env_state, reward, terminated, truncated, info = self._own_step(key_step, state, action, params)
        obs_re, state_re = self.env.reset(key_reset, params)

        def after_reset(reset, stepped):
            return jax.tree.map(lambda r, s: jax.lax.select(terminated | truncated, r, s), reset, stepped)

        return (after_reset(obs_re, obs), obs, after_reset(state_re, env_state), env_state, reward, terminated,
                truncated, info)

    def step_env(self, key, state, action, params):
        raise TypeError("GymnaxAdapter has no step_env: call step, which runs the wrapped environment's own step")

    def reset_env(self, key, params):
        return self.reset(key, params)

    # ---------------------------------------------------------- compact state
    def compact_state(self, state: AdapterState) -> jax.Array:
        """float32[compact_dim]: the (flattened) observation of ``state``, and its own cell id where it has one."""
        return state.compact

    def obs_from_compact(self, compact: jax.Array, params=None) -> jax.Array:
        """The observation (float32, the wrapped environment's shape) a compact state stands for."""
        del params
        return jnp.reshape(compact[..., :self.obs_dim], self.obs_shape).astype(jnp.float32)

    def cell_id(self, compact: jax.Array) -> jax.Array:
        """int32 in [0, num_cells): the environment's own cell id (exact: of the observation, or of the state,
        carried after it), otherwise a 16-bit hash of the observation's float32 bits (approximate)."""
        compact = jnp.asarray(compact, jnp.float32)
        if self.own_cells:
            return self.env.cell_id(compact)
        if self.state_cells:
            return compact[self.obs_dim].astype(jnp.int32)
        bits = jax.lax.bitcast_convert_type(compact + 0.0, jnp.uint32)  # + 0.0 maps -0.0 to 0.0
        index = jnp.arange(self.obs_dim, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9)
        mixed = jnp.sum(mix32(bits ^ mix32(index + jnp.uint32(1))), dtype=jnp.uint32)
        return (mix32(mixed) & jnp.uint32(HASH_CELLS - 1)).astype(jnp.int32)

    def start_compact(self, params=None) -> jax.Array:
        """Compact state of a reset: DeepSea's fixed start; for random starts, the reset drawn with
        ``jax.random.key(START_STATE_SEED)``."""
        params = self._default_params if params is None else params
        _, state = self.reset(jax.random.key(START_STATE_SEED), params)
        return state.compact

    # ----------------------------------------------------------------- spaces
    def action_space(self, params=None):
        return self._action_space

    def observation_space(self, params=None) -> spaces.Box:
        """A float32 box of the observation's shape (bounds from the wrapped space where it has them)."""
        params = self._default_params if params is None else params
        inner = self.env.observation_space(params)
        low = getattr(inner, "low", 0.0)
        high = getattr(inner, "high", getattr(inner, "n", 1.0))
        return spaces.Box(low, high, self.obs_shape, jnp.float32)

    def __repr__(self) -> str:
        args = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return f"GymnaxAdapter({self.env_name!r}{args})"
