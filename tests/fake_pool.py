"""A stand-in for Montezuma's EnvPool pool, in pure JAX, for tests that must not need EnvPool.

It follows the EnvPool facts the pool path relies on (``opiq_jax/envs/montezuma.py``): uint8 stacks of
four 84x84 frames, oldest first; the step after an episode ends is a reset step that ignores the action,
pays 0 and has ``first`` set, its stack holding the new episode's first frame four times; episodes are
truncated after ``max_episode_steps`` agent steps. Everything is a function of each environment's step
counter, so a test can say what every frame, reward and room is:

* frame ``t`` of an episode is all zeros but for one 8x8 block of value 255, in cell ``t % 10`` of a
  10-cell grid (so the count feature changes with ``t``), and a 4x4 block at the top left whose value
  is the last action taken times 14 (so actions show in the frames);
* the reward of the step that reaches ``t`` is ``reward`` when ``t % reward_every == 0`` (else 0);
* the room is ``1 + (t // 10) % 3``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from opiq_jax.envs.montezuma import StepOutput


class FakePool:
    """``reset``, ``step``, ``send`` and ``recv`` as ``MontezumaPool`` has them; the handle is the pool's state."""

    num_actions = 18
    obs_shape = (4, 84, 84)
    spans_devices = False  # one pool: its runs stay on one device

    def __init__(self, num_envs: int, seed: int = 0, max_episode_steps: int = 30, reward_every: int = 7,
                 reward: float = 5.0, game_over_at: int | None = None):
        self.num_envs, self.seed, self.max_episode_steps = num_envs, seed, max_episode_steps
        self.reward_every, self.reward, self.game_over_at = reward_every, reward, game_over_at

    def frame(self, t: jax.Array, action: jax.Array) -> jax.Array:
        """uint8[84, 84]: the frame of episode step ``t`` reached by ``action``."""
        cell = t % 10
        rows = jnp.arange(84)[:, None]
        cols = jnp.arange(84)[None, :]
        block = (rows >= 8 * cell) & (rows < 8 * cell + 8) & (cols >= 40) & (cols < 48)
        corner = (rows < 4) & (cols < 4)
        return jnp.where(block, 255, jnp.where(corner, action * 14, 0)).astype(jnp.uint8)

    def _output(self, t, stack, reward, terminated, truncated, first) -> StepOutput:
        return StepOutput(obs=stack, reward=reward.astype(jnp.float32), terminated=terminated, truncated=truncated,
                          first=first, room=(1 + (t // 10) % 3).astype(jnp.int32),
                          lives=jnp.full((self.num_envs,), 5, jnp.int32))

    def reset(self):
        t = jnp.zeros((self.num_envs,), jnp.int32)
        stack = jnp.repeat(jax.vmap(self.frame)(t, t)[:, None], 4, axis=1)
        no = jnp.zeros((self.num_envs,), bool)
        handle = {"t": t, "stack": stack, "ended": no, "actions": jnp.zeros_like(t)}  # two buffers: a step donates both
        return handle, jax.tree.map(np.asarray, self._output(t, stack, jnp.zeros(self.num_envs), no, no, ~no))

    def step(self, handle, actions):
        actions = jnp.asarray(actions, jnp.int32)
        restart = handle["ended"]
        t = jnp.where(restart, 0, handle["t"] + 1)
        frame = jax.vmap(self.frame)(t, jnp.where(restart, 0, actions))
        pushed = jnp.concatenate([handle["stack"][:, 1:], frame[:, None]], axis=1)
        stack = jnp.where(restart[:, None, None, None], jnp.repeat(frame[:, None], 4, axis=1), pushed)
        pays = (~restart) & (t % self.reward_every == 0)
        reward = jnp.where(pays, self.reward, 0.0)
        over = jnp.zeros_like(restart) if self.game_over_at is None else (t == self.game_over_at)
        terminated = ~restart & over
        truncated = ~restart & ~terminated & (t >= self.max_episode_steps)
        new = {"t": t, "stack": stack, "ended": terminated | truncated, "actions": actions}
        return new, self._output(t, stack, reward, terminated, truncated, restart)

    def send(self, handle, actions):
        return {**handle, "actions": jnp.asarray(actions, jnp.int32)}

    def recv(self, handle):
        return self.step(handle, handle["actions"])
