"""A replay ring of single uint8 frames whose frame stacks are rebuilt at sampling (Atari).

Storing EnvPool's 4-frame stacks would cost four times the memory (1M x 84 x 84 bytes per run is
already about 7 GB), so each slot holds ONE frame. Pure functions in the flashbax style (the
buffer goes in and comes out); one buffer is one run's single environment stream: the trainer
vmaps over runs, and over the environments of a run if it has several (slots must be consecutive
steps of one environment).

Layout. Slot ``k`` stores the observation received at one environment step, as its newest frame
(``frames[k]``, uint8[H, W]), together with the transition that led to it:

* ``action[k]`` int32, ``reward[k]`` float32 (the clipped training reward),
  ``terminated[k]`` / ``truncated[k]`` bool: the action taken in the previous slot's observation,
  the reward it earned, and whether that step ended the episode (a game over / the time cap);
* ``first[k]`` bool: this observation is an episode's first (EnvPool's reset step, or the very
  first observation); no transition leads to it, and its action/reward fields mean nothing;
* ``mc_return[k]`` float32: the discounted return from transition ``k`` to the end of its episode,
  written by :func:`fill_episode_returns` when the episode ends, 0 until then.

Every frame is stored, including the final frame of a truncated episode (to bootstrap from) and the
first frame of the next. The transition (s, a, r, s') is "slot k-1's observation -> slot k" and
exists only when slot k is not ``first`` (and slot k-1 is still stored).

Frame stacks. The stack of slot ``k`` is the frames of slots ``k-3 .. k`` (oldest first), except
that slots before the episode's first frame are replaced by that first frame: right after a reset
EnvPool fills its whole stack with the first frame (it does not zero-fill), so the rebuilt stacks
equal EnvPool's bit for bit and never contain a frame of a previous episode. A stack is
*complete* when every frame it needs is still stored; only the oldest one to three slots of a full
ring can be incomplete, and they are never sampled as start states.

Ages. Internally positions are "ages": age 0 is the oldest stored slot, ``size - 1`` the newest.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class FrameReplay:
    """One run's ring of single frames (see the module docstring for the layout)."""

    frames: jax.Array  # uint8[C, H, W]: the newest frame of the observation at each step
    action: jax.Array  # int32[C]: the action that led to this observation
    reward: jax.Array  # float32[C]: its (clipped) reward
    terminated: jax.Array  # bool[C]: that step was a true terminal
    truncated: jax.Array  # bool[C]: that step hit the time cap
    first: jax.Array  # bool[C]: this observation starts an episode (no transition leads to it)
    mc_return: jax.Array  # float32[C]: discounted return from this transition to the episode end
    position: jax.Array  # int32: where the next frame goes
    size: jax.Array  # int32: how many slots are stored (<= capacity)
    count_target: jax.Array | None = None  # uint32[C]: a learned count's coin flips of the transition (None: none)

    @property
    def capacity(self) -> int:
        return self.frames.shape[0]


@struct.dataclass
class FrameBatch:
    """A batch of n-step windows sampled from a :class:`FrameReplay` (B rows, n window steps).

    ``obs`` uint8[B, stack, H, W]: the stack of the start state s_t.
    ``actions`` int32[B, n], ``rewards`` float32[B, n], ``terminated`` bool[B, n]: step i of the
    window, (s_{t+i}, a_{t+i}) -> r_{t+i}, s_{t+i+1}; rewards and terminated are zero/False where
    not ``included``.
    ``included`` bool[B, n]: step i counts (it exists, and no earlier step of the window ended the
    episode); step 0 is always True. The steps taken, L = ``included.sum(1)``, are a prefix.
    ``count_frames`` uint8[B, n, H, W]: the newest frame of s_{t+i} (to recount the intrinsic
    reward of (s_{t+i}, a_{t+i}) with the current counts); meaningful only where ``included``.
    ``next_obs`` uint8[B, stack, H, W]: the stack of s_{t+L}, the state after the last included step
    (bootstrap from it unless ``terminated[:, L-1]``; after a truncation it is the episode's final
    observation).
    ``mc_return`` float32[B]: the ``mc_return`` of the first transition (0 while its episode runs).
    ``valid`` bool[B]: False only if no valid start was found within ``num_tries`` draws (or the
    buffer holds no transition yet); mask such rows out of the loss.
    ``slots`` int32[B]: the slot of s_t (for debugging and priorities).
    """

    obs: jax.Array
    actions: jax.Array
    rewards: jax.Array
    terminated: jax.Array
    included: jax.Array
    count_frames: jax.Array
    next_obs: jax.Array
    mc_return: jax.Array
    valid: jax.Array
    slots: jax.Array
    count_targets: jax.Array | None = None  # uint32[B, n]: a learned count's coin flips of each window step


def init(capacity: int, frame_shape: tuple[int, ...] = (84, 84), count_targets: bool = False) -> FrameReplay:
    """An empty ring of ``capacity`` slots of uint8 frames of ``frame_shape`` (``count_targets``: with a slot per
    transition for what a learned count stores with it)."""
    if capacity < 2:
        raise ValueError(f"frame replay capacity must be at least 2, got {capacity}")
    return FrameReplay(
        frames=jnp.zeros((capacity, *frame_shape), jnp.uint8),
        action=jnp.zeros((capacity,), jnp.int32),
        reward=jnp.zeros((capacity,), jnp.float32),
        terminated=jnp.zeros((capacity,), bool),
        truncated=jnp.zeros((capacity,), bool),
        first=jnp.zeros((capacity,), bool),
        mc_return=jnp.zeros((capacity,), jnp.float32),
        position=jnp.int32(0),
        size=jnp.int32(0),
        count_target=jnp.zeros((capacity,), jnp.uint32) if count_targets else None,
    )


def add(
    buffer: FrameReplay,
    frame: jax.Array,
    action: jax.Array,
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    first: jax.Array,
    count_target: jax.Array | None = None,
) -> FrameReplay:
    """Stores one step: the newest ``frame`` (uint8[H, W]) of the observation just received and the
    transition that led to it (scalars; ignored meaning when ``first``; ``count_target``: what a learned count keeps
    with it, 0 where not given). Overwrites the oldest slot once full; the slot's ``mc_return`` restarts at 0.
    """
    chex.assert_shape(frame, buffer.frames.shape[1:])
    chex.assert_rank([action, reward, terminated, truncated, first], 0)
    p = buffer.position
    targets = buffer.count_target
    if targets is not None:
        targets = targets.at[p].set(jnp.uint32(0) if count_target is None else jnp.asarray(count_target, jnp.uint32))
    return buffer.replace(
        count_target=targets,
        frames=buffer.frames.at[p].set(jnp.asarray(frame, jnp.uint8)),
        action=buffer.action.at[p].set(jnp.asarray(action, jnp.int32)),
        reward=buffer.reward.at[p].set(jnp.asarray(reward, jnp.float32)),
        terminated=buffer.terminated.at[p].set(jnp.asarray(terminated, bool)),
        truncated=buffer.truncated.at[p].set(jnp.asarray(truncated, bool)),
        first=buffer.first.at[p].set(jnp.asarray(first, bool)),
        mc_return=buffer.mc_return.at[p].set(0.0),
        position=(p + 1) % buffer.capacity,
        size=jnp.minimum(buffer.size + 1, buffer.capacity),
    )


def _oldest(buffer: FrameReplay) -> jax.Array:
    return jnp.mod(buffer.position - buffer.size, buffer.capacity)


def _slot_of_age(buffer: FrameReplay, age: jax.Array) -> jax.Array:
    """The slot holding ``age`` (0 = oldest stored); negative ages map to unstored slots."""
    return jnp.mod(_oldest(buffer) + age, buffer.capacity)


def _stack_sources(buffer: FrameReplay, age: jax.Array, stack: int) -> tuple[jax.Array, jax.Array]:
    """Where the frames of the stack at ``age`` (int32[...]) come from: their ages, int32[..., stack]
    oldest first, and whether every one of them is still stored (bool[...])."""
    back = age[..., None] - jnp.arange(stack)  # ages at distance 0 .. stack-1 behind
    is_first = buffer.first[_slot_of_age(buffer, back)] & (back >= 0)
    # Distance to the episode's first frame if it lies within the stack; frames further back are
    # replaced by that first frame (EnvPool repeats the first frame after a reset).
    first_dist = jnp.where(is_first.any(-1), jnp.argmax(is_first, -1), stack - 1)
    src_age = age[..., None] - jnp.minimum(jnp.arange(stack), first_dist[..., None])
    complete = src_age[..., -1] >= 0
    return jnp.flip(src_age, axis=-1), complete


def _frames_at_ages(buffer: FrameReplay, ages: jax.Array) -> jax.Array:
    """uint8[..., H, W]: the frames stored at ``ages`` (clamped to the oldest stored frame)."""
    return buffer.frames[_slot_of_age(buffer, jnp.maximum(ages, 0))]


def stack_at(buffer: FrameReplay, slot: jax.Array, stack: int = 4) -> tuple[jax.Array, jax.Array]:
    """The frame stack of the observation stored in ``slot`` (int32[...]), rebuilt from the ring.

    Returns ``(obs uint8[..., stack, H, W], complete bool[...])``; where ``complete`` the stack is
    exactly EnvPool's; elsewhere (the oldest slots of a full ring) its oldest frames were
    overwritten and are replaced by the oldest stored one.
    """
    slot = jnp.asarray(slot, jnp.int32)
    age = jnp.mod(slot - _oldest(buffer), buffer.capacity)
    src_age, complete = _stack_sources(buffer, age, stack)
    return _frames_at_ages(buffer, src_age), complete


def frames_after(buffer: FrameReplay, slots: jax.Array, count: int) -> jax.Array:
    """uint8[..., count, H, W]: the frames stored 1 .. ``count`` slots after each of ``slots`` (the states the
    steps of a window reached; clamped to the oldest stored frame, meaningful where the window includes them)."""
    ages = jnp.mod(jnp.asarray(slots, jnp.int32) - _oldest(buffer), buffer.capacity)
    return _frames_at_ages(buffer, ages[..., None] + 1 + jnp.arange(count))


def newest_frames(buffer: FrameReplay, count: int) -> tuple[jax.Array, jax.Array]:
    """The ``count`` newest stored frames (uint8[count, H, W], newest first) and whether each is stored yet."""
    ages = jnp.arange(count)
    slots = (buffer.position - 1 - ages) % buffer.capacity
    return buffer.frames[slots], ages < buffer.size


def return_unknown(buffer: FrameReplay, slots: jax.Array, episode_steps: jax.Array) -> jax.Array:
    """bool[...]: whether the transition from the observation in each of ``slots`` belongs to the running episode,
    whose Monte Carlo return is not known yet. That episode's ``episode_steps`` transitions are the newest slots;
    the transition from slot ``k`` is stored in slot ``k + 1``."""
    ages = jnp.mod(jnp.asarray(slots, jnp.int32) - _oldest(buffer), buffer.capacity)
    return ages + 1 >= buffer.size - episode_steps


def _ended(buffer: FrameReplay, slots: jax.Array) -> jax.Array:
    return buffer.terminated[slots] | buffer.truncated[slots]


def sample(
    buffer: FrameReplay,
    key: chex.PRNGKey,
    batch_size: int,
    n_step: int,
    stack: int = 4,
    num_tries: int = 8,
) -> FrameBatch:
    """``batch_size`` n-step windows whose start transitions are uniform over the valid ones.

    A start state at age ``a`` is valid when its transition exists (``a + 1`` is stored and is not
    ``first``, and slot ``a`` itself did not end an episode) and its stack is complete. Sampling is
    rejection sampling: each row draws ``num_tries`` ages uniformly over ``[0, size - 2]`` and keeps
    the first valid one, which is exactly uniform over the valid transitions given that one was
    found. A row finds none with probability ``f ** num_tries`` (``f`` the fraction of invalid
    starts: about one per episode plus the three oldest slots, so tiny for Atari episodes); such a
    row has ``valid`` False and must be masked out of the loss.

    Windows stop after a step that ended the episode (terminated or truncated), at EnvPool's reset
    step (a ``first`` slot) and at the newest slot: they never cross an episode boundary.
    """
    size = buffer.size
    ages = jax.random.randint(key, (num_tries, batch_size), 0, jnp.maximum(size - 1, 1))
    next_slot = _slot_of_age(buffer, ages + 1)
    _, complete = _stack_sources(buffer, ages, stack)
    ok = (
        (ages + 1 < size)
        & ~buffer.first[next_slot]
        & ~_ended(buffer, _slot_of_age(buffer, ages))
        & complete
    )
    pick = jnp.argmax(ok, axis=0)
    rows = jnp.arange(batch_size)
    start = ages[pick, rows]
    valid = ok[pick, rows]

    step_ages = start[:, None] + 1 + jnp.arange(n_step)  # the slot each window step leads to
    step_slots = _slot_of_age(buffer, step_ages)
    ended = _ended(buffer, step_slots)
    ended_before = jnp.concatenate([jnp.zeros((batch_size, 1), bool), ended[:, :-1]], axis=1)
    step_ok = (step_ages < size) & ~buffer.first[step_slots] & ~ended_before
    step_ok = step_ok.at[:, 0].set(True)  # valid rows satisfy it already
    included = jnp.cumprod(step_ok, axis=1).astype(bool)
    num_steps = included.sum(axis=1)

    # One gather of all frames: the two stacks and the window's count frames.
    obs_ages, _ = _stack_sources(buffer, jnp.stack([start, start + num_steps], axis=1), stack)
    count_ages = start[:, None] + jnp.arange(n_step)
    frames = _frames_at_ages(buffer, jnp.concatenate([obs_ages.reshape(batch_size, 2 * stack), count_ages], 1))
    obs = frames[:, :stack]
    next_obs = frames[:, stack : 2 * stack]
    batch = FrameBatch(
        obs=obs,
        actions=buffer.action[step_slots],
        rewards=jnp.where(included, buffer.reward[step_slots], 0.0),
        terminated=buffer.terminated[step_slots] & included,
        included=included,
        count_frames=frames[:, 2 * stack :],
        next_obs=next_obs,
        mc_return=buffer.mc_return[step_slots[:, 0]],
        valid=valid,
        slots=_slot_of_age(buffer, start),
        count_targets=None if buffer.count_target is None else buffer.count_target[step_slots],
    )
    frame_shape = buffer.frames.shape[1:]
    chex.assert_shape([batch.obs, batch.next_obs], (batch_size, stack, *frame_shape))
    chex.assert_shape(batch.count_frames, (batch_size, n_step, *frame_shape))
    chex.assert_shape([batch.actions, batch.rewards, batch.terminated, batch.included], (batch_size, n_step))
    chex.assert_shape([batch.mc_return, batch.valid, batch.slots], (batch_size,))
    return batch


def _affine_compose(later, earlier):
    """Composes x -> a x + b maps for a reverse scan: ``earlier`` applied after ``later``."""
    a_later, b_later = later
    a_earlier, b_earlier = earlier
    return a_earlier * a_later, a_earlier * b_later + b_earlier


def fill_episode_returns(
    buffer: FrameReplay,
    gamma: jax.Array | float,
    max_episode_steps: int,
    ended: jax.Array | bool | None = None,
) -> FrameReplay:
    """Writes ``mc_return`` for every transition of the episode that the newest slot ended.

    Call it right after adding a slot whose transition ended its episode (terminated or truncated):
    G_k = r_k + gamma * G_{k+1} over the episode's transitions, G_last = r_last. The episode's
    transitions are the slots after its ``first`` slot up to the newest; they are found among the
    last ``min(max_episode_steps, capacity)`` slots (gathered with wrap-around) and the recurrence
    runs as a reverse ``jax.lax.associative_scan`` (log depth; no 4500-step loop).

    ``ended`` (bool scalar, optional): when given, the new returns are written only if it is True,
    and only those ``max_episode_steps`` entries are selected, not the whole buffer; use it under
    ``vmap`` instead of selecting the whole buffer with ``jnp.where(ended, new, old)`` (which is also
    correct, but selects every leaf, frames included).
    """
    capacity = buffer.capacity
    window = min(int(max_episode_steps), capacity)
    ages = buffer.size - window + jnp.arange(window)  # newest last; may start below 0
    slots = _slot_of_age(buffer, ages)  # distinct slots since window <= capacity
    stored = ages >= 0
    first = buffer.first[slots] & stored
    # A slot belongs to the newest episode when it is stored, not first, and no first slot follows.
    firsts_from_here = jnp.cumsum(first[::-1])[::-1]
    in_episode = stored & ~first & (firsts_from_here == 0)
    rewards = jnp.where(in_episode, buffer.reward[slots], 0.0)
    continues = jnp.concatenate([in_episode[1:], jnp.zeros((1,), bool)])
    decay = jnp.asarray(gamma, jnp.float32) * continues
    _, returns = jax.lax.associative_scan(_affine_compose, (decay, rewards), reverse=True)
    old = buffer.mc_return[slots]
    write = in_episode if ended is None else in_episode & jnp.asarray(ended, bool)
    return buffer.replace(mc_return=buffer.mc_return.at[slots].set(jnp.where(write, returns, old)))


__all__ = ["FrameBatch", "FrameReplay", "add", "fill_episode_returns", "frames_after", "init", "newest_frames",
           "return_unknown", "sample", "stack_at"]
