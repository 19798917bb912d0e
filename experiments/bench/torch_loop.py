"""A PyTorch loop in the authors' structure (one environment per process), not their code.

The authors' OPIQ code trains one run per process: act, store, then one minibatch update per environment
step, with pseudocounts kept in Python. Their code is not part of this project, so this module rebuilds that
structure to measure what one such process does per second, on a CPU or a GPU:

* one environment: this project's chain or maze, stepped one step at a time on the CPU by a jitted JAX function
  (the observation is copied to a NumPy array each step), or one EnvPool Montezuma's Revenge with the paper's
  settings (``opiq_jax.envs.atari.make_envpool``, one environment);
* the paper's network in PyTorch: the chain's MLP of 256 x 256 on the thermometer observation, the maze's two
  3 x 3 stride-2 convolutions of 16 channels, FC 400 and FC 200, or the Nature DQN network on Montezuma's
  stack of four 84 x 84 frames;
* pseudocounts in a Python dict per code: SimHash codes (``sign(A @ obs)``, A Gaussian with the environment's
  bits) on the chain and the maze, the paper's 8 x 11 frame feature of 8 levels on Montezuma (without the mixed
  Monte Carlo return);
* OPIQ's acting on ``Q+ = Q + C_action / (N + 1)^M`` (epsilon-greedy), the intrinsic reward ``beta / sqrt(N)``
  and the bootstrap ``max_a' Q_target + C_bootstrap / (N + 1)^M``, n-step targets cut at episode ends;
* replay of the environment's size in NumPy arrays; from ``batch + 1`` stored steps on, one update per
  environment step: MSE TD loss, global-norm clip, RMSProp (lr 5e-4, decay 0.99, eps 1e-8), a target network
  copied every ``target_update`` steps (Montezuma: one update every 4 steps, rewards clipped to [-1, 1]).
  The batch, n, the update period, replay size, clip and target period are this project's
  settings for the environment (``opiq_jax.registry.environments``), the hyperparameters OPIQ's paper ones.

It prints one JSON line: environment steps per second of this one process, timed after a warm-up.
Run: ``python -m experiments.bench.torch_loop --env chain --steps 3000 --device cpu`` (``--env montezuma`` needs
EnvPool).
Torch is not a dependency of opiq-jax; without it this exits with a one-line error.

Reaches inside: opiq_jax.envs, opiq_jax.registry.environments and opiq_jax.registry.methods, to step the same
environments with the paper's settings as the JAX agent.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import tyro

LABEL = "a PyTorch loop in the authors' structure (one environment per process), not their code"


@dataclass
class Args:
    env: Literal["chain", "maze", "montezuma"] = "chain"
    """The environment of the one run."""
    steps: int = 3_000
    """Timed environment steps (after the warm-up)."""
    warmup: int = 200
    """Steps before timing, past the first update (the batch fills, torch and JAX compile)."""
    device: str = "cpu"
    """Torch device: cpu, cuda, or auto (cuda where available)."""
    threads: int = 1
    """Torch CPU threads (1: as when one process per core runs)."""
    seed: int = 0
    buffer_size: int | None = None
    """Replay steps (default: the environment's; Montezuma's 1M stacks of frames would take 56 GB here)."""


def import_torch() -> Any:
    """``torch``, or a one-line error (exit 2) where it is not installed."""
    try:
        import torch
    except ImportError:
        sys.exit("experiments.bench.torch_loop needs PyTorch, which opiq-jax does not install: pip install torch")
    return torch


def make_network(torch: Any, env: str, obs_shape: tuple[int, ...], num_actions: int) -> Any:
    """The paper's Q-network for ``env`` as a ``torch.nn.Sequential`` (input as the environment gives it)."""
    nn = torch.nn
    if env == "chain":
        return nn.Sequential(nn.Linear(obs_shape[0], 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, num_actions))
    if env == "montezuma":  # the Nature DQN network on [4, 84, 84] frames
        return nn.Sequential(
            nn.Conv2d(obs_shape[0], 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
            nn.Linear(512, num_actions))
    return nn.Sequential(  # maze: [24, 24, 1] observations, channels moved first in `to_input`
        nn.Conv2d(obs_shape[-1], 16, 3, stride=2), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 400), nn.ReLU(), nn.Linear(400, 200), nn.Linear(200, num_actions))


def to_input(torch: Any, obs: np.ndarray, device: Any) -> Any:
    """A batch of observations as the network's input tensor: the maze's channels moved first, frames (uint8)
    scaled to [0, 1] on the device."""
    tensor = torch.from_numpy(np.ascontiguousarray(obs)).to(device)
    if tensor.dtype == torch.uint8:
        return tensor.float() / 255.0
    return tensor.permute(0, 3, 1, 2) if tensor.ndim == 4 else tensor


class Counts:
    """Pseudocounts per (code, action) in a Python dict, as a per-process loop keeps them; ``codes`` is the
    subclass's."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions
        self.table: dict[bytes, np.ndarray] = {}

    def codes(self, obs: np.ndarray) -> list[bytes]:
        raise NotImplementedError

    def counts(self, codes: list[bytes]) -> np.ndarray:
        """``int[B, actions]``: the counts of every action at each code."""
        zero = np.zeros(self.num_actions, np.int64)
        return np.stack([self.table.get(code, zero) for code in codes])

    def add(self, code: bytes, action: int) -> None:
        self.table.setdefault(code, np.zeros(self.num_actions, np.int64))[action] += 1


class SimHashCounts(Counts):
    """Counts of SimHash codes ``sign(A @ obs)``, A Gaussian of ``bits`` rows."""

    def __init__(self, bits: int, obs_size: int, num_actions: int, rng: np.random.Generator):
        super().__init__(num_actions)
        self.matrix = rng.standard_normal((bits, obs_size)).astype(np.float32)

    def codes(self, obs: np.ndarray) -> list[bytes]:
        """The code of each observation in a batch ``[B, ...]``."""
        signs = obs.reshape(len(obs), -1) @ self.matrix.T > 0
        return [row.tobytes() for row in np.packbits(signs, axis=1)]


class FrameCounts(Counts):
    """Counts of the paper's Montezuma feature: the newest frame area-downsampled to 8 x 11, in 8 levels (the
    weights of ``opiq_jax.primitives.counts``)."""

    def codes(self, obs: np.ndarray) -> list[bytes]:
        """The code of each stack of frames in a batch ``[B, 4, 84, 84]``."""
        from opiq_jax.primitives.counts import _MR_COLS, _MR_ROWS

        small = _MR_ROWS @ obs[:, -1].astype(np.float32) @ _MR_COLS.T
        levels = np.clip(np.floor(small / 32.0 + 1e-4), 0, 7).astype(np.uint8)
        return [row.tobytes() for row in levels]


class Replay:
    """A ring of transitions in NumPy arrays: observation, action, reward, terminal, episode end, next observation."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], dtype: Any = np.float32):
        self.capacity, self.size, self.position = capacity, 0, 0
        self.obs = np.zeros((capacity, *obs_shape), dtype)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype)
        self.action = np.zeros(capacity, np.int64)
        self.reward = np.zeros(capacity, np.float32)
        self.terminal = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, np.float32)

    def add(self, obs, action, reward, terminal, done, next_obs) -> None:
        i = self.position
        self.obs[i], self.action[i], self.reward[i] = obs, action, reward
        self.terminal[i], self.done[i], self.next_obs[i] = terminal, done, next_obs
        self.position, self.size = (i + 1) % self.capacity, min(self.size + 1, self.capacity)

    def windows(self, rng: np.random.Generator, batch: int, n: int) -> np.ndarray:
        """``int[batch, n]`` indices of n consecutive stored steps, oldest first, none past the newest."""
        oldest = (self.position - self.size) % self.capacity
        starts = oldest + rng.integers(0, self.size - n + 1, batch)
        return (starts[:, None] + np.arange(n)) % self.capacity


def make_env_step(env_name: str, seed: int) -> tuple[Any, Any, np.ndarray, int]:
    """A jitted CPU step of this project's environment with the reset folded in, its first state and observation.

    ``step(state, action) -> (next_obs, reward, terminal, done, state, obs)``: ``next_obs`` before a reset,
    ``obs`` the observation to act on next.
    """
    import jax
    import jax.numpy as jnp
    from opiq_jax.envs import Maze, RandomisedChain

    env = RandomisedChain() if env_name == "chain" else Maze()
    params = env.sample_params(jax.random.key(seed))

    @jax.jit
    def step(state, action):
        key = jax.random.key(0)  # both environments are deterministic given their parameters
        next_obs, after, reward, terminal, _ = env.step_env(key, state, action, params)
        done = terminal | (after.time >= params.max_steps_in_episode)
        reset_obs, reset_state = env.reset_env(key, params)
        state = jax.tree.map(lambda r, a: jnp.where(done, r, a), reset_state, after)
        return next_obs, reward, terminal, done, state, jnp.where(done, reset_obs, next_obs)

    obs, state = env.reset_env(jax.random.key(0), params)
    return step, state, np.array(obs), env.num_actions


def make_pool_step(seed: int) -> tuple[Any, Any, np.ndarray, int]:
    """One EnvPool Montezuma's Revenge with the paper's settings, in the form of :func:`make_env_step`
    (``state`` is unused; the reward is clipped to [-1, 1])."""
    from opiq_jax.envs.atari import atari_game, make_envpool

    pool = make_envpool(atari_game("MontezumaRevenge"), 1, seed, env="montezuma")

    def step(state, action):
        next_obs, reward, terminated, truncated, _ = pool.step(np.array([action]))
        done = bool(terminated[0] or truncated[0])
        following = pool.reset()[0][0] if done else next_obs[0]
        return next_obs[0], np.clip(reward[0], -1.0, 1.0), bool(terminated[0]), done, state, following

    return step, None, pool.reset()[0][0], int(pool.action_space.n)


@dataclass
class Learner:
    """The torch side of one run: networks, optimiser and the settings of its update."""

    torch: Any
    device: Any
    online: Any
    target: Any
    optimiser: Any
    settings: dict[str, float]


def make_learner(torch: Any, env: str, obs_shape, num_actions: int, device: Any, hparams: dict, static: Any) -> Learner:
    """Online and target networks on ``device`` and RMSProp with the paper's settings."""
    online = make_network(torch, env, obs_shape, num_actions).to(device)
    target = make_network(torch, env, obs_shape, num_actions).to(device)
    target.load_state_dict(online.state_dict())
    optimiser = torch.optim.RMSprop(online.parameters(), lr=hparams["lr"], alpha=static.rms_decay, eps=static.rms_eps)
    settings = dict(gamma=static.gamma, clip=static.grad_clip, n=static.n_step, batch=static.batch_size,
                    target_update=static.target_update,
                    **{k: hparams[k] for k in ("m", "c_action", "c_bootstrap", "beta")})
    return Learner(torch, device, online, target, optimiser, settings)


def nstep_targets(learner: Learner, replay: Replay, counts: SimHashCounts, index: np.ndarray) -> np.ndarray:
    """OPIQ's n-step targets of the windows ``index`` ([batch, n]), cut at each window's first episode end."""
    s = learner.settings
    batch, n = index.shape
    codes = counts.codes(replay.obs[index.ravel()])
    taken = counts.counts(codes)[np.arange(batch * n), replay.action[index.ravel()]].reshape(batch, n)
    rewards = replay.reward[index] + s["beta"] / np.sqrt(np.maximum(taken, 1))
    ends = replay.done[index]
    alive = np.cumprod(np.concatenate([np.ones((batch, 1)), 1 - ends[:, :-1]], axis=1), axis=1)
    length = alive.sum(axis=1).astype(np.int64)  # steps up to and including the first episode end
    last = index[np.arange(batch), length - 1]
    discounts = s["gamma"] ** np.arange(n)
    returns = (alive * discounts * rewards).sum(axis=1)
    next_obs = replay.next_obs[last]
    with learner.torch.no_grad():
        q_next = learner.target(to_input(learner.torch, next_obs, learner.device)).cpu().numpy()
    bonus = s["c_bootstrap"] / (counts.counts(counts.codes(next_obs)) + 1.0) ** s["m"]
    bootstrap = (q_next + bonus).max(axis=1) * (1 - replay.terminal[last])
    return (returns + s["gamma"] ** length * bootstrap).astype(np.float32)


def update(learner: Learner, replay: Replay, counts: SimHashCounts, rng: np.random.Generator) -> None:
    """One minibatch update: MSE TD loss, global-norm clip, one RMSProp step."""
    torch, s = learner.torch, learner.settings
    index = replay.windows(rng, int(s["batch"]), int(s["n"]))
    targets = torch.from_numpy(nstep_targets(learner, replay, counts, index)).to(learner.device)
    first = index[:, 0]
    q = learner.online(to_input(torch, replay.obs[first], learner.device))
    taken = q.gather(1, torch.from_numpy(replay.action[first]).to(learner.device)[:, None])[:, 0]
    loss = torch.nn.functional.mse_loss(taken, targets)
    learner.optimiser.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(learner.online.parameters(), s["clip"])
    learner.optimiser.step()


def act(learner: Learner, counts: SimHashCounts, obs: np.ndarray, epsilon: float,
        rng: np.random.Generator) -> tuple[int, bytes]:
    """Epsilon-greedy on Q+ with the counts before this step's increment; the action and the state's code."""
    s = learner.settings
    code = counts.codes(obs[None])[0]
    with learner.torch.no_grad():
        q = learner.online(to_input(learner.torch, obs[None], learner.device))[0].cpu().numpy()
    if rng.random() < epsilon:
        return int(rng.integers(counts.num_actions)), code
    optimism = s["c_action"] / (counts.counts([code])[0] + 1.0) ** s["m"]
    return int(np.argmax(q + optimism)), code


def run_loop(args: Args) -> dict[str, Any]:
    """Runs ``warmup + steps`` environment steps of the loop; the timed rate and what it ran with."""
    torch = import_torch()
    from opiq_jax.registry.environments import static_for_env
    from opiq_jax.registry.methods import method_hparams

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    static, hparams = static_for_env(args.env), method_hparams(args.env, "opiq")
    rng = np.random.default_rng(args.seed)
    atari = args.env == "montezuma"
    env_step, state, obs, num_actions = make_pool_step(args.seed) if atari else make_env_step(args.env, args.seed)
    learner = make_learner(torch, args.env, obs.shape, num_actions, device, hparams, static)
    counts = FrameCounts(num_actions) if atari else SimHashCounts(static.simhash_bits, obs.size, num_actions, rng)
    buffer_size = args.buffer_size or static.buffer_size
    replay = Replay(buffer_size, obs.shape, obs.dtype)
    warmup = max(args.warmup, static.batch_size + static.n_step + 1)
    started = 0.0
    for t in range(warmup + args.steps):
        if t == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
        epsilon = max(hparams["epsilon_end"],
                      hparams["epsilon_start"] - t * (hparams["epsilon_start"] - hparams["epsilon_end"])
                      / max(hparams["epsilon_decay_steps"], 1.0))
        action, code = act(learner, counts, obs, epsilon, rng)
        next_obs, reward, terminal, done, state, following = env_step(state, action)
        counts.add(code, action)
        replay.add(obs, action, float(reward), float(terminal), float(done), np.asarray(next_obs))
        obs = np.array(following)
        if replay.size > static.batch_size + static.n_step and (t + 1) % static.train_every == 0:
            update(learner, replay, counts, rng)
        if (t + 1) % static.target_update == 0:
            learner.target.load_state_dict(learner.online.state_dict())
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return dict(label=LABEL, env=args.env, device=name, torch_device=device.type, torch_version=torch.__version__,
                threads=args.threads, steps_timed=args.steps, seconds=seconds,
                env_steps_per_second=args.steps / seconds,
                batch_size=static.batch_size, n_step=static.n_step, train_every=static.train_every,
                buffer_size=buffer_size,
                counted="8x11 frame feature" if atari else f"SimHash, {static.simhash_bits} bits")


def main(argv: list[str] | None = None) -> None:
    """Command line: prints the result as one JSON line."""
    print(json.dumps(run_loop(tyro.cli(Args, args=argv))), flush=True)


if __name__ == "__main__":
    main()
