"""Any Atari game through EnvPool, stepped from inside compiled JAX code, with the paper's Montezuma settings.

A game is an :class:`AtariGame`: EnvPool's name for it (``MontezumaRevenge``, ``Venture``) and, where the game
has rooms and this module knows where its RAM keeps the current one, that byte (:data:`ROOM_BYTES`:
Montezuma's Revenge only). A game without one reports room 0 at every step.

The paper's Montezuma setting (``PAPER_SETTINGS``, every entry overridable by keyword), used for every game:

* ``<game>-v5`` with the gymnasium API, sticky actions ``repeat_action_probability=0.25``,
  frame skip 4 (EnvPool max-pools the last two of the four emulator frames), greyscale 84x84
  (INTER_AREA resize), a stack of 4 frames, the full 18-action set;
* no life-loss terminal (``episodic_life=False``), no fire on reset (``use_fire_reset=False``),
  no random no-op starts (``noop_max=1``, see below), unclipped rewards (``reward_clip=False``:
  the agent clips for training with :func:`clip_reward` and reports unclipped returns);
* a cap of ``max_episode_steps=4500`` agent steps, reported as a truncation.

``AtariPool(game, num_envs, seed)`` holds one EnvPool pool of ``num_envs`` environments in
synchronous mode (``batch_size == num_envs``). ``pool.reset()`` runs on the host and returns the
XLA handle and the first observations; ``pool.step(handle, actions)`` is pure from JAX's point of
view (the pool lives behind the handle) and may be called inside ``jax.jit`` and ``jax.lax.scan``,
with the handle threaded through the carry. Only one chain of handles may be in flight per pool,
and ``reset`` must run once before the first ``step``.

EnvPool facts this module relies on (EnvPool 1.2.5, checked by ``tests/test_montezuma.py``):

* ``noop_max``: EnvPool draws the number of reset no-ops from ``[0, noop_max - 1]`` and then adds
  one (minus one when it fires on reset), so ``noop_max=0`` is invalid (it crashes the process
  with a segmentation fault at the first reset) and ``noop_max=1`` is the smallest allowed value:
  every reset then takes exactly one emulator no-op frame and no random no-ops, i.e. a
  deterministic start, which is the paper's "no no-op starts".
* The auto-reset step: the step after an episode ends (terminated or truncated) is EnvPool's reset;
  it ignores the action, returns reward 0, ``terminated = truncated = False`` and
  ``info["elapsed_step"] == 0``. That observation is the first of the new episode and no real
  transition leads to it: ``StepOutput.first`` flags it (:func:`is_reset_step`).
* The frame stack right after a reset (the very first one and every auto-reset) holds the first
  frame of the new episode in all four slots: EnvPool repeats the first frame, it does not
  zero-fill. Within an episode ``obs[:, k]`` is ordered oldest (``k = 0``) to newest (``k = 3``).
* In synchronous mode the rows of every result are in ``env_id`` order (0..num_envs-1), both
  through the Python API and through the XLA interface, so no reordering is needed.
* ``info["ram"]`` (uint8[N, 128]) is available; in Montezuma's Revenge byte 3 is the current room (1 at the
  start).
* The gymnasium API reports ``terminated = done and not truncated``, so a game over on exactly
  the capped step would read as a truncation; ``StepOutput.terminated`` uses EnvPool's
  ``info["terminated"]`` (the emulator's game-over flag) as well, so a game over is always a
  terminal and never a truncation.
* The XLA interface works on CPU (and registers a GPU target too); the handle is a uint8[8]
  array and its ``step`` aliases the handle buffer, so it threads through a ``lax.scan`` carry.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

VERSION = "v5"
"""EnvPool's version of the Atari tasks with sticky actions and the full action set (Machado et al., 2018)."""

ROOM_BYTES: dict[str, int] = {"MontezumaRevenge": 3}
"""The games whose current room this module reads, and the RAM byte that holds it."""


def envpool_missing(env: str) -> str:
    """The one-line message for a game asked for without EnvPool installed."""
    return f"--env {env} needs EnvPool: pip install -e '.[atari]'"


@dataclasses.dataclass(frozen=True)
class AtariGame:
    """One Atari game: EnvPool's name for it and, where it has rooms, the RAM byte of the current room."""

    name: str
    """EnvPool's name without the version (``MontezumaRevenge``, ``PrivateEye``)."""
    room_ram_index: int | None = None

    @property
    def task_id(self) -> str:
        return f"{self.name}-{VERSION}"

    @property
    def has_rooms(self) -> bool:
        return self.room_ram_index is not None


def atari_game(name: str) -> AtariGame:
    """The game EnvPool calls ``name`` (``Venture`` or ``Venture-v5``); a one-line ``ValueError`` for a bad name."""
    game = name.removesuffix(f"-{VERSION}")
    if not game or not game.replace("_", "").isalnum():
        raise ValueError(f"an Atari game is named as EnvPool names it (Venture, PrivateEye, MontezumaRevenge), got "
                         f"{name!r}")
    return AtariGame(game, ROOM_BYTES.get(game))

PAPER_SETTINGS: dict[str, Any] = {
    "repeat_action_probability": 0.25,
    "frame_skip": 4,
    "img_height": 84,
    "img_width": 84,
    "gray_scale": True,
    "stack_num": 4,
    "episodic_life": False,
    "full_action_space": True,
    "max_episode_steps": 4500,
    "use_fire_reset": False,
    "noop_max": 1,  # the smallest value EnvPool allows: no random no-op starts
    "reward_clip": False,
}


class StepOutput(NamedTuple):
    """What one batched step (or the reset) of the pool returns, one row per environment.

    ``obs`` uint8[N, stack, H, W]: EnvPool's frame stack, oldest to newest.
    ``reward`` float32[N]: the unclipped game reward of this step (0 on a reset step).
    ``terminated`` bool[N]: the game is over (a true terminal, no bootstrap).
    ``truncated`` bool[N]: the episode hit ``max_episode_steps`` without a game over.
    ``first`` bool[N]: this observation is an episode's first (EnvPool's reset step, or the
    observation from ``reset``); no transition leads to it and the action sent was ignored.
    ``room`` int32[N]: the current room (from RAM; 0 in a game without rooms).
    ``lives`` int32[N]: lives left.
    """

    obs: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    first: jax.Array
    room: jax.Array
    lives: jax.Array


def room_from_ram(ram: jax.Array, index: int | None) -> jax.Array:
    """The current room, int32[...], from the Atari RAM uint8[..., 128] (its byte ``index``; 0 where None)."""
    ram = jnp.asarray(ram)
    if index is None:
        return jnp.zeros(ram.shape[:-1], jnp.int32)
    return ram[..., index].astype(jnp.int32)


def is_reset_step(elapsed_step: jax.Array) -> jax.Array:
    """bool[...]: True on EnvPool's reset step, where ``info["elapsed_step"] == 0``.

    That step ignores the action and returns reward 0; its observation starts a new episode.
    """
    return jnp.asarray(elapsed_step) == 0


def newest_frame(obs: jax.Array) -> jax.Array:
    """The newest frame of a stack: ``obs[..., -1, :, :]`` (uint8[..., H, W] from uint8[..., stack, H, W]).

    This is what the replay stores for each step and what the counts are keyed on.
    """
    return jnp.asarray(obs)[..., -1, :, :]


def clip_reward(reward: jax.Array) -> jax.Array:
    """The training reward: ``reward`` clipped to [-1, 1], float32."""
    return jnp.clip(jnp.asarray(reward, jnp.float32), -1.0, 1.0)


def _step_output(obs, reward, terminated, truncated, info, room_index: int | None) -> StepOutput:
    """Builds a ``StepOutput`` from EnvPool's gymnasium-style results (numpy or traced arrays)."""
    first = is_reset_step(info["elapsed_step"])
    game_over = (jnp.asarray(info["terminated"]) != 0) & ~first
    terminated = (jnp.asarray(terminated).astype(bool) | game_over) & ~first
    truncated = jnp.asarray(truncated).astype(bool) & ~terminated & ~first
    return StepOutput(
        obs=jnp.asarray(obs, jnp.uint8),
        reward=jnp.where(first, 0.0, jnp.asarray(reward, jnp.float32)),
        terminated=terminated,
        truncated=truncated,
        first=first,
        room=room_from_ram(info["ram"], room_index),
        lives=jnp.asarray(info["lives"], jnp.int32),
    )


def import_envpool(env: str):
    """Imports EnvPool lazily; a missing EnvPool is a one-line ``ImportError`` naming ``env``."""
    try:
        import envpool  # noqa: PLC0415 (an optional dependency)
    except ImportError:
        raise ImportError(envpool_missing(env)) from None
    return envpool


def check_game(game: AtariGame, env: str) -> None:
    """A one-line ``ValueError`` when EnvPool has no such game (``ImportError`` when EnvPool is missing)."""
    known = import_envpool(env).list_all_envs()
    if game.task_id not in known:
        close = [t.removesuffix(f"-{VERSION}") for t in known if t.endswith(f"-{VERSION}")
                 and game.name.lower()[:4] in t.lower()]
        hint = f"; did you mean {', '.join(close[:3])}?" if close else ""
        raise ValueError(f"EnvPool has no Atari game {game.name!r} ({game.task_id}){hint}")


def make_envpool(game: AtariGame, num_envs: int, seed: int, env: str = "atari", **overrides: Any):
    """A raw EnvPool gymnasium pool of ``game`` with the paper's settings (``PAPER_SETTINGS``), overridden by
    ``overrides`` (any EnvPool Atari option, e.g. ``max_episode_steps=30`` or ``num_threads=2``).

    Raises a one-line ``ImportError`` naming ``env`` (how the user asked for it) when EnvPool is not installed.
    """
    if "batch_size" in overrides and overrides["batch_size"] not in (0, num_envs):
        raise ValueError("an Atari pool runs EnvPool in synchronous mode: batch_size must equal num_envs")
    overrides.pop("batch_size", None)
    if overrides.get("noop_max", 1) < 1:
        raise ValueError("EnvPool needs noop_max >= 1 (noop_max=1 already means no random no-ops)")
    envpool = import_envpool(env)
    settings = {**PAPER_SETTINGS, **overrides}
    return envpool.make(
        game.task_id,
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=num_envs,
        seed=seed,
        **settings,
    )


class AtariPool:
    """One EnvPool pool of ``num_envs`` environments of ``game``, stepped through EnvPool's XLA API.

    Attributes: ``game``, ``num_envs``, ``num_actions`` (18 with the full action set), ``obs_shape``
    (``(4, 84, 84)``, uint8, as EnvPool gives it), ``settings`` (the resolved EnvPool options) and
    ``env`` (the raw EnvPool object, kept alive here because the XLA functions point into it).

    The trainer's runs x envs_per_run environments live in one pool: reshape ``[N]`` to
    ``[runs, envs]`` around ``step`` (a pool cannot be vmapped).
    """

    spans_devices = False
    """One pool: its runs stay on one device (:class:`DevicePools` splits them over several)."""

    def __init__(self, game: AtariGame, num_envs: int, seed: int, env: str = "atari", **overrides: Any):
        if num_envs <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        self.game = game
        self.env = make_envpool(game, num_envs, seed, env, **overrides)
        self.num_envs = int(num_envs)
        self.settings = {**PAPER_SETTINGS, **{k: v for k, v in overrides.items() if k != "batch_size"}}
        self.num_actions = int(self.env.action_space.n)
        self.obs_shape = tuple(int(d) for d in self.env.observation_space.shape)
        self.max_episode_steps = int(self.settings["max_episode_steps"])
        self._handle, self._xla_recv, self._xla_send, self._xla_step = self.env.xla()

    def reset(self) -> tuple[jax.Array, StepOutput]:
        """Resets every environment (host side) and returns ``(handle, first)``.

        ``handle`` is the XLA handle (uint8[8]) to thread through ``step``; ``first`` is a
        ``StepOutput`` whose ``obs`` are the initial stacks (the first frame repeated four
        times), with ``first`` all True, reward 0, not terminated, not truncated.
        """
        obs, info = self.env.reset()
        zeros = np.zeros(self.num_envs, bool)
        out = _step_output(obs, np.zeros(self.num_envs, np.float32), zeros, zeros, info, self.game.room_ram_index)
        return jnp.asarray(self._handle), out

    def step(self, handle: jax.Array, actions: jax.Array) -> tuple[jax.Array, StepOutput]:
        """Sends ``actions`` (int32[num_envs]) to every environment and receives the results.

        Usable inside ``jax.jit`` and ``jax.lax.scan``: returns the new handle (pass it to the next
        call) and a ``StepOutput``. On an environment whose previous step ended its episode this
        step is EnvPool's reset: the action is ignored and ``first`` is True.
        """
        actions = jnp.asarray(actions, jnp.int32)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"expected actions of shape ({self.num_envs},), got {actions.shape}")
        handle, (obs, reward, terminated, truncated, info) = self._xla_step(handle, actions)
        return handle, _step_output(obs, reward, terminated, truncated, info, self.game.room_ram_index)

    def send(self, handle: jax.Array, actions: jax.Array) -> jax.Array:
        """The first half of :meth:`step`: hands ``actions`` to the emulators and returns at once.

        The emulators step on EnvPool's threads while the compiled program goes on (the agent
        learns meanwhile); :meth:`recv` then waits for the results. ``send`` then ``recv`` is
        exactly ``step``.
        """
        actions = jnp.asarray(actions, jnp.int32)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"expected actions of shape ({self.num_envs},), got {actions.shape}")
        return self._xla_send(handle, actions, jnp.arange(self.num_envs, dtype=jnp.int32))

    def recv(self, handle: jax.Array) -> tuple[jax.Array, StepOutput]:
        """The second half of :meth:`step`: waits for the results of the last :meth:`send`."""
        handle, (obs, reward, terminated, truncated, info) = self._xla_recv(handle)
        return handle, _step_output(obs, reward, terminated, truncated, info, self.game.room_ram_index)


class DevicePools:
    """Several pools, one per device of ``mesh``, stepped as one: the runs axis is split over the devices and each
    device's runs step the emulators of their own pool.

    ``pools[d]`` holds the environments of the ``d``-th block of runs (equal sizes; seeded so that environment ``i``
    overall gets the seed one pool of them all would give it: ``seed + i``). ``reset`` gives the pools' handles side
    by side (``uint8[8 * D]``) and their first observations, split over the devices like the runs.

    ``step``, ``send`` and ``recv`` run *inside* a ``shard_map`` over the mesh's axis (the trainer runs each device's
    runs that way), on one device's share: its handle ``uint8[8]`` and its ``envs_per_device`` actions. Each calls
    its own device's pool through a ``lax.switch`` on the device's index, because EnvPool binds a pool to its XLA
    functions when it makes them. The devices' emulators step at the same time, on threads of their own.
    """

    spans_devices = True

    def __init__(self, pools: list[AtariPool], mesh: jax.sharding.Mesh, axis: str = "runs"):
        if len(pools) != mesh.size:
            raise ValueError(f"one pool per device: {len(pools)} pools for {mesh.size} devices")
        if len({p.num_envs for p in pools}) != 1:
            raise ValueError("the pools of the devices must be of one size")
        self.pools, self.mesh, self.axis = list(pools), mesh, axis
        first = self.pools[0]
        self.game, self.settings = first.game, first.settings
        self.envs_per_device = first.num_envs
        self.num_envs = self.envs_per_device * len(self.pools)
        self.num_actions, self.obs_shape, self.max_episode_steps = (first.num_actions, first.obs_shape,
                                                                    first.max_episode_steps)
        self.by_device = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis))

    def reset(self) -> tuple[jax.Array, StepOutput]:
        """Resets every pool (host side): the handles side by side and the first observations, split like the runs."""
        handles, outs = zip(*(p.reset() for p in self.pools))
        handle = jax.device_put(np.concatenate([np.asarray(h) for h in handles]), self.by_device)
        first = jax.tree.map(lambda *xs: jax.device_put(np.concatenate([np.asarray(x) for x in xs]), self.by_device),
                             *outs)
        return handle, first

    def step(self, handle: jax.Array, actions: jax.Array) -> tuple[jax.Array, StepOutput]:
        """This device's pool steps with this device's runs' ``actions`` (inside the ``shard_map``)."""
        return self._on_this_device(lambda p, h, a: p.step(h, a), handle, actions)

    def send(self, handle: jax.Array, actions: jax.Array) -> jax.Array:
        """:meth:`AtariPool.send` on this device's pool (inside the ``shard_map``)."""
        return self._on_this_device(lambda p, h, a: p.send(h, a), handle, actions)

    def recv(self, handle: jax.Array) -> tuple[jax.Array, StepOutput]:
        """:meth:`AtariPool.recv` on this device's pool (inside the ``shard_map``)."""
        return self._on_this_device(lambda p, h: p.recv(h), handle)

    def _on_this_device(self, call, *args):
        branches = [lambda *a, p=p: call(p, *a) for p in self.pools]
        return jax.lax.switch(jax.lax.axis_index(self.axis), branches, *args)


def threads_per_pool(num_pools: int, envs_per_pool: int, cores: int | None = None) -> int:
    """Emulator threads for each of ``num_pools`` pools: the host's cores shared out, never more than a pool's
    environments (a thread per environment at most), at least one."""
    cores = cores or os.cpu_count() or 1
    return max(1, min(envs_per_pool, cores // num_pools))
