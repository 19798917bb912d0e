"""Does RMSProp make a smaller reward scale act as a larger learning rate? Q-learning on a fixed, hand-built MDP.

Montezuma's learner ran away with β = 0.01 and not with β = 0.1 at the same learning rate (docs/choices.md). The
suspected mechanism: RMSProp divides each step by the root mean square of its gradients, so a weight moves by about
``lr`` whatever the rewards' scale, and values ten times smaller are learned with steps ten times larger beside
them. If so, scaling the rewards by ``c`` is the same as scaling the learning rate by ``1 / c``, in units of the
value scale ``c / (1 - gamma)``.

This checks it where everything is known: ``--states`` random feature vectors, 18 actions, each (state, action)
with a fixed next state and a fixed reward ``c * u`` (``u`` uniform in [0, 1), like an intrinsic bonus), gamma 0.99,
so that no value exceeds ``c / (1 - gamma)``. An MLP learns Q by 1-step Q-learning from uniformly sampled batches
of 32, the mean squared TD error, a target network copied every ``--target-every`` updates, and the project's
optimiser (global-norm clip 5, PyTorch-style RMSProp, decay 0.99, eps 1e-8: ``opiq_jax.agent.trainer``). Every
cell (a reward scale and a learning rate) starts from the same network and samples the same batches; the cells
are vmapped into one program. Recorded every ``--log-every`` updates, in units of the value bound: the largest |Q|
over all pairs and the mean |Q - Q*| (Q* by value iteration).

Run: ``python -m experiments.studies.reward_scale --out docs/results/reward-scale``.

Reaches inside: opiq_jax.agent.trainer.make_optimiser and opiq_jax.common.config.StaticConfig, for the trainer's own
optimiser settings.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if not __package__:  # run by path: import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro

from opiq_jax.agent.trainer import make_optimiser
from opiq_jax.common.config import StaticConfig
from opiq_jax.store.files import atomic_write_text
from opiq_jax.reporting import portable, source_revision

ACTIONS, GAMMA, BATCH = 18, 0.99, 32


@dataclass
class Args:
    out: Path
    """Where reward_scale.json, reward_scale.md, settings.json, run_info.json and reward_scale.png go."""
    cells: tuple[str, ...] = ("0.1:2.5e-4", "0.01:2.5e-4", "0.1:2.5e-3", "0.01:2.5e-4:0.1", "0.1:5e-4", "0.01:5e-4",
                              "0.1:5e-3")
    """Reward scale c, learning rate and (optionally) the factor on the output layer's initial weights, as
    C:LR[:HEAD] (HEAD 0.1 with c 0.01 starts the network's outputs at the scale c 0.1's start at)."""
    states: int = 256
    features: int = 32
    hidden: int = 256
    updates: int = 60_000
    target_every: int = 2_000
    """Updates between target copies (Montezuma: 8,000 steps at one update per 4)."""
    log_every: int = 1_000
    seed: int = 0


class QNet(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(self.hidden)(x))
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(ACTIONS)(x)


def make_mdp(args: Args):
    """Features ``[S, F]``, next states ``[S, A]`` and unit rewards ``u`` ``[S, A]`` (the reward is ``c * u``)."""
    k1, k2, k3 = jax.random.split(jax.random.key(args.seed), 3)
    features = jax.random.normal(k1, (args.states, args.features))
    following = jax.random.randint(k2, (args.states, ACTIONS), 0, args.states)
    unit = jax.random.uniform(k3, (args.states, ACTIONS))
    return features, following, unit


def optimal_q(following: jax.Array, unit: jax.Array) -> jax.Array:
    """Q* of the unit rewards by value iteration (``c * Q*`` for rewards ``c * u``)."""
    def sweep(q, _):
        return unit + GAMMA * q[following].max(-1), None

    q, _ = jax.lax.scan(sweep, jnp.zeros_like(unit), None, length=3_000)
    return q


def scaled_head(params, head: jax.Array):
    """``params`` with the output layer's weights and bias times ``head``."""
    last = sorted(params["params"])[-1]  # Dense_0, Dense_1, Dense_2: the output layer sorts last
    return {"params": {**params["params"], last: jax.tree.map(lambda w: w * head, params["params"][last])}}


def train_cell(args: Args, mdp, params0, scale: jax.Array, lr: jax.Array, head: jax.Array) -> dict[str, jax.Array]:
    """One cell's Q-learning; its log every ``log_every`` updates, in units of the bound ``scale / (1 - gamma)``."""
    features, following, unit = mdp
    params0 = scaled_head(params0, head)
    net, opt = QNet(args.hidden), make_optimiser(StaticConfig())
    bound = scale / (1 - GAMMA)
    q_star = scale * optimal_q(following, unit)

    def loss(params, target, s, a):
        q = net.apply(params, features[s])[jnp.arange(BATCH), a]
        y = scale * unit[s, a] + GAMMA * net.apply(target, features[following[s, a]]).max(-1)
        return jnp.mean((jax.lax.stop_gradient(y) - q) ** 2)

    def update(carry, i):
        params, target, opt_state = carry
        s, a = jax.random.randint(jax.random.fold_in(jax.random.key(args.seed + 1), i), (2, BATCH), 0,
                                  jnp.array([[args.states], [ACTIONS]]))
        grads = jax.grad(loss)(params, target, s, a)
        steps, opt_state = opt.update(grads, opt_state)
        params = optax.apply_updates(params, jax.tree.map(lambda g: -lr * g, steps))
        target = jax.tree.map(lambda t, p: jnp.where((i + 1) % args.target_every == 0, p, t), target, params)
        return (params, target, opt_state), None

    def logged(carry, j):
        carry, _ = jax.lax.scan(update, carry, j * args.log_every + jnp.arange(args.log_every))
        q = net.apply(carry[0], features)
        return carry, {"q_abs_max": jnp.abs(q).max() / bound, "q_error": jnp.abs(q - q_star).mean() / bound}

    start = (params0, params0, opt.init(params0))
    _, log = jax.lax.scan(logged, start, jnp.arange(args.updates // args.log_every))
    return log


def parse_cells(cells: tuple[str, ...]) -> list[tuple[float, float, float]]:
    """``(c, lr, head)`` per cell (head 1 unless given)."""
    parsed = []
    for cell in cells:
        try:
            values = [float(x) for x in cell.split(":")]
        except ValueError:
            values = []
        if len(values) not in (2, 3):
            raise SystemExit(f"--cells: {cell!r} is not C:LR or C:LR:HEAD (for example 0.01:2.5e-4)")
        if min(values) <= 0:
            raise SystemExit(f"--cells: {cell!r}: the reward scale, learning rate and head factor must be positive")
        parsed.append((values[0], values[1], values[2] if len(values) == 3 else 1.0))
    return parsed


def table(rows: list[dict]) -> str:
    lines = ["| reward scale c | lr | lr / c | output layer's init | peak max\\|Q\\| / bound | "
             "last max\\|Q\\| / bound | "
             "last mean \\|Q - Q*\\| / bound |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scale']:g} | {r['lr']:g} | {r['lr'] / r['scale']:g} | x{r['head']:g} | "
                     f"{max(r['q_abs_max']):.3g} | "
                     f"{r['q_abs_max'][-1]:.3g} | {r['q_error'][-1]:.3g} |")
    return "\n".join(lines)


def draw(rows: list[dict], args: Args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, args.updates // args.log_every + 1) * args.log_every
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        style = "-" if r["scale"] == max(x["scale"] for x in rows) else "--"
        for ax, key in zip(axes, ("q_abs_max", "q_error")):
            head = f", head x{r['head']:g}" if r["head"] != 1 else ""
            ax.plot(steps, r[key], style,
                    label=f"c {r['scale']:g}, lr {r['lr']:g} (lr/c {r['lr'] / r['scale']:g}){head}")
    for ax, title in zip(axes, ("largest |Q| / (c / (1 - γ))", "mean |Q - Q*| / (c / (1 - γ))")):
        ax.set_yscale("log")
        ax.set_xlabel("updates")
        ax.set_title(title, fontsize=9)
    axes[0].axhline(1.0, color="0.3", ls=":", lw=1)
    axes[1].legend(fontsize=7, frameon=False)
    fig.suptitle("Q-learning with RMSProp on a fixed MDP: reward scale against learning rate", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    cells = parse_cells(args.cells)
    if args.updates % args.log_every or args.updates < args.log_every:
        raise SystemExit("--updates must be a positive multiple of --log-every")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    mdp = make_mdp(args)
    params0 = QNet(args.hidden).init(jax.random.key(args.seed + 2), mdp[0][:1])
    scales, lrs, heads = (jnp.array([c[i] for c in cells], jnp.float32) for i in (0, 1, 2))
    run = jax.jit(jax.vmap(lambda s, lr, h: train_cell(args, mdp, params0, s, lr, h)))
    log = jax.device_get(run(scales, lrs, heads))
    rows = [{"scale": s, "lr": lr, "head": h, **{k: [float(v) for v in log[k][i]] for k in log}}
            for i, (s, lr, h) in enumerate(cells)]
    text = table(rows)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(args).items()}
    given = argv if argv is not None else sys.argv[1:]
    command = ["python", "-m", "experiments.studies.reward_scale", *map(portable, given)]
    atomic_write_text(args.out / "reward_scale.json", json.dumps(rows, indent=1))
    atomic_write_text(args.out / "reward_scale.md", text + "\n")
    atomic_write_text(args.out / "settings.json", json.dumps({"command": command, "settings": settings}, indent=1))
    draw(rows, args, args.out / "reward_scale.png")
    atomic_write_text(args.out / "run_info.json", json.dumps(
        {"command": command, "device": f"{jax.devices()[0].device_kind} ({platform.node()}, {jax.device_count()} "
         f"device)", "seconds": round(time.monotonic() - started, 1), **source_revision()}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
