"""Any registered gymnax environment behind the interface the opiq-jax trainer uses.

``GymnaxAdapter("DeepSea-bsuite", size=20)`` wraps ``gymnax.make(name)`` and adds what the trainer
needs on top of gymnax's API (see ``envs/chain.py`` for the reference semantics):

* ``reset(key, params) -> (obs, state)`` and ``step(key, state, action, params) -> (obs, state,
  reward, terminated, truncated, info)`` exactly as the wrapped environment's own ``reset``/``step``
  (auto-reset included), with the observation cast to ``float32``. ``info["compact"]`` is the
  flattened observation *before* any auto-reset and ``info["cell_id"]`` its cell id.
* The compact state of a transition is the flattened ``float32`` observation: the adapter state
  carries the observation it last returned, so ``compact_state(state)`` is exact for every
  environment (also for ones whose observation needs a key or the params), and
  ``obs_from_compact(compact, params)`` just reshapes it. Replay then stores
  ``2 * prod(obs_shape)`` floats per transition (DeepSea N=40: 12.8 kB).
* ``cell_id(compact)`` for "distinct states visited": exact for DeepSea (``row * N + column`` of the
  one-hot observation; the all-zero observation after the last row is cell ``N * N``, so
  ``num_cells = N * N + 1``); for every other environment a 16-bit hash of the observation's bytes
  (``num_cells = 2**16``), an approximate count (collisions merge states; continuous observations
  make almost every state distinct).
* No cell table (``has_cell_table`` False): the trainer counts these environments by hashing the observation
  each time.

Keyword arguments are routed by name: a constructor argument of the gymnax class (DeepSea's
``size``; an ``int`` for an argument whose name ends in ``key`` becomes ``jax.random.key(int)``) or a
field of its ``EnvParams`` (``max_steps_in_episode``, DeepSea's ``deterministic``, ...). A name that
is both goes to the constructor. Unknown names, unknown environments, continuous action spaces and
missing Python packages fail with a one-line ``ValueError``/``ImportError``.

DeepSea's action mapping. gymnax draws the mapping (which action moves right in each cell) once, at
construction, from ``action_mapping_key`` (default ``key(0)``), and copies it into the state at every
reset; so every run built from one environment object would share it. The adapter makes the mapping
a params field instead (:class:`DeepSeaRunParams`, ``action_mapping: int32[N, N]``) and writes it into
the wrapped state after every ``reset`` and ``step``: ``default_params`` holds gymnax's own mapping
(so with them the adapter is step-for-step identical to ``gymnax.make``), and ``sample_params(key)``
draws a fresh Bernoulli(1/2) mapping from ``key``, so each run gets its own, as the chain's flips.
gymnax's switches keep their meaning: ``randomize_actions=False`` uses the all-ones mapping and
``sample_action_map=True`` keeps gymnax's per-episode mapping drawn from the reset key.

Horizons: the trainer scans ``int(default_params.max_steps_in_episode)`` steps for each greedy test
episode. Most gymnax environments use 100-1000 (DeepSea: N); Freeway-MinAtar uses 2500 and
MountainCarContinuous 999 (continuous actions are refused anyway). Pass ``max_steps_in_episode`` to
shorten it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .base import CompactEnvironment
from .hashing import mix32

# Distinct cell ids of environments other than DeepSea: the observation hashed into 16 bits.
HASH_CELLS = 1 << 16

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
    from gymnax.environments import environment, spaces
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


class GymnaxAdapter(CompactEnvironment):
    """A registered gymnax environment with the compact-state interface of the opiq-jax trainer."""

    def __init__(self, name: str, **kwargs: Any):
        super().__init__()
        if name not in gymnax.registered_envs:
            raise ValueError(f"unknown gymnax environment {name!r}; registered: {', '.join(gymnax.registered_envs)}")
        factory = registration._registry[name]
        ctor_names = self._constructor_arguments(factory)
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
        param_kwargs = {k: v for k, v in kwargs.items() if k not in ctor_names}
        params = params.replace(**param_kwargs)
        action_space = env.action_space(params)
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(
                f"gymnax:{name} has a continuous action space ({type(action_space).__name__}); "
                "OPIQ and its DQN baselines need discrete actions"
            )

        self.env = env
        self.env_name = name
        self.kwargs = dict(kwargs)
        self.is_deep_sea = isinstance(env, deep_sea.DeepSea)
        if self.is_deep_sea:
            params = DeepSeaRunParams(
                **{f: getattr(params, f) for f in field_names}, action_mapping=jnp.asarray(env.action_mapping, jnp.int32)
            )
        self._default_params = params
        obs = jax.eval_shape(lambda k: env.reset(k, params)[0], jax.random.key(START_STATE_SEED))  # shape only
        self.obs_shape = tuple(obs.shape)
        self.obs_dim = int(np.prod(self.obs_shape))
        self._num_actions = int(action_space.n)
        self._action_space = action_space
        self.compact_dim = self.obs_dim

    @staticmethod
    def _constructor_arguments(factory) -> list[str]:
        try:
            signature = inspect.signature(factory)
        except (TypeError, ValueError):
            return []
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return [p.name for p in signature.parameters.values() if p.kind in kinds and p.name != "self"]

    # ------------------------------------------------------------------ sizes
    @property
    def name(self) -> str:
        return self.env_name

    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def num_cells(self) -> int:
        """Size of the cell-id space: N * N + 1 for DeepSea (exact), 2**16 hash buckets otherwise."""
        return self.env.size * self.env.size + 1 if self.is_deep_sea else HASH_CELLS

    # ----------------------------------------------------------------- params
    @property
    def default_params(self):
        """The wrapped environment's default params with the keyword arguments applied."""
        return self._default_params

    def sample_params(self, key: jax.Array):
        """One run's params: DeepSea draws its own action mapping from ``key``; other environments
        have no per-run randomisation and return ``default_params`` (their randomness comes from the
        reset and step keys)."""
        params = self._default_params
        if self.is_deep_sea:
            size = self.env.size
            mapping = jax.random.bernoulli(key, 0.5, (size, size)).astype(jnp.int32)
            params = params.replace(action_mapping=mapping)
        return params

    def _fix_state(self, env_state, params):
        """DeepSea: the run's action mapping (see the module docstring); others: unchanged."""
        if not self.is_deep_sea:
            return env_state
        size = self.env.size
        fixed = jnp.where(params.randomize_actions, params.action_mapping, jnp.ones((size, size), jnp.int32))
        mapping = jnp.where(params.sample_action_map, env_state.action_mapping, fixed)
        return env_state.replace(action_mapping=mapping.astype(jnp.int32))

    # ---------------------------------------------------------------- dynamics
    def flatten(self, obs: jax.Array) -> jax.Array:
        """float32[obs_dim]: an observation as a compact state."""
        return jnp.reshape(obs, (self.obs_dim,)).astype(jnp.float32)

    def reset(self, key: jax.Array, params=None) -> tuple[jax.Array, AdapterState]:
        """The wrapped ``reset``; the observation as float32."""
        params = self._default_params if params is None else params
        obs, env_state = self.env.reset(key, params)
        env_state = self._fix_state(env_state, params)
        compact = self.flatten(obs)
        return self.obs_from_compact(compact, params), AdapterState(env_state, compact)

    def step(self, key: jax.Array, state: AdapterState, action, params=None):
        """The wrapped ``step`` (auto-reset included). ``info`` adds ``compact``/``cell_id`` of the
        state reached *before* any auto-reset."""
        params = self._default_params if params is None else params
        action = jnp.asarray(action, jnp.int32)
        obs, env_state, reward, terminated, truncated, info = self.env.step(key, state.env_state, action, params)
        env_state = self._fix_state(env_state, params)
        if "final_observation" not in info:
            raise ValueError(
                f"gymnax:{self.env_name} is not supported: its step returns no info['final_observation'] "
                "(the pre-reset observation needed to bootstrap after a truncation)"
            )
        final = self.flatten(info["final_observation"])
        compact = self.flatten(obs)
        info = {**info, "compact": final, "cell_id": self.cell_id(final)}
        new_state = AdapterState(env_state, compact)
        return (
            self.obs_from_compact(compact, params),
            new_state,
            jnp.asarray(reward, jnp.float32),
            jnp.asarray(terminated, bool),
            jnp.asarray(truncated, bool),
            info,
        )

    def step_env(self, key, state, action, params):
        raise TypeError("GymnaxAdapter has no step_env: call step, which runs the wrapped environment's own step")

    def reset_env(self, key, params):
        return self.reset(key, params)

    # ---------------------------------------------------------- compact state
    def compact_state(self, state: AdapterState) -> jax.Array:
        """float32[obs_dim]: the (flattened) observation of ``state``."""
        return state.compact

    def obs_from_compact(self, compact: jax.Array, params=None) -> jax.Array:
        """The observation (float32, the wrapped environment's shape) a compact state stands for."""
        del params
        return jnp.reshape(compact, self.obs_shape).astype(jnp.float32)

    def cell_id(self, compact: jax.Array) -> jax.Array:
        """int32 in [0, num_cells): DeepSea ``row * N + column`` (``N * N`` after the last row), exact;
        otherwise a 16-bit hash of the observation's float32 bits (approximate)."""
        compact = jnp.asarray(compact, jnp.float32)
        if self.is_deep_sea:
            size = self.env.size
            return jnp.where(jnp.max(compact) > 0, jnp.argmax(compact), size * size).astype(jnp.int32)
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
    def action_space(self, params=None) -> spaces.Discrete:
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
