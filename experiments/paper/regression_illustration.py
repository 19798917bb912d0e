"""The paper's 1-D regression illustration (Figure 2) and its counting-granularity appendix figure.

Run ``python -m experiments.paper.regression_illustration --out results/regression``.

What it shows
-------------
* **Figure 2, left** (``fig2_left_optimistic_init.png``): 10 ReLU networks whose final-layer bias is
  initialised at 3 (green) and the same networks after fitting the blue data points (red). Away from
  the data the trained networks keep no trace of the optimistic initialisation: they extrapolate
  differently from one another and nowhere near 3 (in the default run every network stays below 0.4 far
  from the data), so an optimistic initialisation of a neural network cannot be relied on to stay
  optimistic where nothing was seen.
* **Figure 2, right** (``fig2_right_count_bonus.png``): one trained network ``f`` and its output plus the
  count-based bonus of the paper's equation (1), ``f(x) + C / (N(x) + 1) ** M``, where ``N(x)`` is the
  number of training inputs in ``x``'s bin of a 50-bin histogram over ``[-2, 2]``. The bonus is exactly
  ``C`` where there is no data and small where there is plenty.
* **Appendix, granularity** (``granularity_6_vs_50_bins.png``): the same with 6 bins (only inputs far from
  the data get a bonus) and with 50 bins (every input not very close to a data point gets one). The
  coarse histogram's cost shows too: a bin holding a few points at its edge (here ``[0.67, 1.33]``, 3
  points) gives only a small bonus across the whole bin, although most of it is far from the data.

The data set
------------
Two clusters of inputs drawn uniformly from ``[-1.55, -1.05]`` and ``[0.25, 0.75]`` (20 points each by
default), targets ``0.5 * sin(3 x)`` plus Gaussian noise of standard deviation 0.05. The targets lie in
``[-0.5, 0.5]``, well below the optimistic bias of 3, and the clusters leave three empty regions to
extrapolate into: ``[-2, -1.55]``, the gap ``[-1.05, 0.25]`` and ``[0.75, 2]``. With 6 bins (width 2/3),
bins 3 (``[-0.67, 0]``) and 6 (``[1.33, 2]``) hold no data.

The networks are 1 -> 64 -> 64 -> 1 ReLU MLPs with PyTorch's default initialisation (weights and biases
uniform on ``+-1/sqrt(fan_in)``, ``nn.Linear``'s default), then the output bias set to 3;
``--init flax`` uses flax's defaults instead, as the agent's MLP does (LeCun-normal weights, zero biases: every
initial curve bends only at 0).
All networks are trained at once (``jax.vmap`` over their parameters, ``lax.scan`` over full-batch Adam
steps, one ``jit``).

The bonus defaults to ``C = 3`` (the same optimism as the bias-3 initialisation, so both panels speak of
the same height) and ``M = 2``.

Numbers in ``regression_illustration.json``: "at the data" means the training inputs; "far from the data"
means points of an evenly spaced grid over ``[-2, 2]`` whose distance to the nearest training input is at
least ``--far-distance``. ``spread`` is the standard deviation across the networks, averaged over points.

Uses the public ``opiq_jax.optimism_bonus``, the agent's own ``C / (N + 1)^M``; the networks are this script's, built
as the agent's MLP is (ReLU layers, the output layer named ``head``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from matplotlib.figure import Figure

from opiq_jax import optimism_bonus

LOW, HIGH = -2.0, 2.0
PRECISION = "float32"
"""The networks' precision (JAX's default: data, weights and Adam all float32), for the figures' captions."""

# The data set and the initialisations are drawn once; compiling them without LLVM's optimisation passes saves
# seconds (the threefry random bits compile slowly on CPU) at no measurable run-time cost. Only for top-level
# calls (XLA options cannot be given to a nested jit); training keeps the default optimisation level.
quick_jit = partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})


@dataclass(frozen=True)
class Args:
    """Reproduce the paper's 1-D regression illustration (Figure 2) and the 6-vs-50-bins appendix figure."""

    out: Path = Path("results/regression")
    """Folder for the three PNGs and regression_illustration.json (created if missing)."""
    seed: int = 0
    """Seed of the data set and of the networks' initialisations."""
    num_networks: int = 10
    """Networks trained side by side (vmapped over their init keys)."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of each ReLU MLP (1 input, 1 output)."""
    init: Literal["torch", "flax"] = "torch"
    """Weight initialisation: 'torch' draws weights and biases from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's
    nn.Linear default), so the initial curves bend at different inputs; 'flax' is flax's default, as the agent's
    MLP (LeCun-normal weights, zero biases), whose ReLU units all bend at x = 0."""
    final_bias: float = 3.0
    """Initial value of every network's final-layer bias: the optimistic initialisation."""
    steps: int = 3000
    """Full-batch Adam steps on the mean squared error."""
    lr: float = 1e-3
    """Adam learning rate."""
    clusters: tuple[float, ...] = (-1.3, 0.5)
    """Centres of the clusters of training inputs."""
    cluster_width: float = 0.5
    """Each cluster's inputs are uniform on [centre - width/2, centre + width/2]."""
    points_per_cluster: int = 20
    """Training points in each cluster."""
    noise: float = 0.05
    """Standard deviation of the Gaussian noise on the targets 0.5 * sin(3 x)."""
    bonus_scale: float = 3.0
    """C of the bonus C / (N + 1) ** M (the bonus where a bin holds no data)."""
    bonus_exponent: float = 2.0
    """M of the bonus C / (N + 1) ** M."""
    bins: int = 50
    """Histogram bins over [-2, 2] for the Figure 2 (right) counts."""
    coarse_bins: int = 6
    """The coarse histogram of the granularity figure (shown beside --bins)."""
    grid_points: int = 401
    """Evenly spaced evaluation points over [-2, 2] for the curves and the numbers."""
    far_distance: float = 0.5
    """A grid point is 'far from the data' when its nearest training input is at least this far away."""
    shown_network: int = 0
    """Index of the trained network shown with the bonus."""


# ------------------------------------------------------------------------------------------ data


def target_function(x: jax.Array) -> jax.Array:
    """The smooth function behind the targets: ``0.5 * sin(3 x)``."""
    return 0.5 * jnp.sin(3.0 * x)


@partial(quick_jit, static_argnames=("centres", "width", "per_cluster", "noise"))
def make_dataset(key: chex.PRNGKey, centres: Sequence[float], width: float, per_cluster: int,
                 noise: float) -> tuple[jax.Array, jax.Array]:
    """Inputs uniform in each cluster ``[c - width/2, c + width/2]``, noisy targets; ``x, y`` of shape ``[N]``."""
    key_x, key_noise = jax.random.split(key)
    centres_arr = jnp.asarray(centres, jnp.float32)
    offsets = jax.random.uniform(key_x, (len(centres), per_cluster), minval=-width / 2, maxval=width / 2)
    x = jnp.sort((centres_arr[:, None] + offsets).reshape(-1))
    y = target_function(x) + noise * jax.random.normal(key_noise, x.shape)
    chex.assert_shape([x, y], (len(centres) * per_cluster,))
    return x, y


# -------------------------------------------------------------------------------------- counting


@partial(jax.jit, static_argnames=("num_bins", "low", "high"))
def bin_index(x: jax.Array, num_bins: int, low: float = LOW, high: float = HIGH) -> jax.Array:
    """The bin of each ``x`` among ``num_bins`` equal bins over ``[low, high]``.

    Bins are half-open ``[left, right)`` except the last, which also holds ``high`` (as ``np.histogram``);
    inputs outside the range fall into the nearest end bin.
    """
    idx = jnp.floor((x - low) / (high - low) * num_bins).astype(jnp.int32)
    return jnp.clip(idx, 0, num_bins - 1)


@partial(jax.jit, static_argnames=("num_bins", "low", "high"))
def histogram_counts(data: jax.Array, num_bins: int, low: float = LOW, high: float = HIGH) -> jax.Array:
    """Number of ``data`` points in each of ``num_bins`` equal bins over ``[low, high]``; shape ``[num_bins]``."""
    chex.assert_rank(data, 1)
    return jnp.zeros(num_bins, jnp.int32).at[bin_index(data, num_bins, low, high)].add(1)


@partial(jax.jit, static_argnames=("num_bins", "low", "high"))
def counts_at(query: jax.Array, data: jax.Array, num_bins: int, low: float = LOW, high: float = HIGH) -> jax.Array:
    """``N(x)``: the histogram count of ``data`` in the bin of each ``query`` point; shape of ``query``."""
    return histogram_counts(data, num_bins, low, high)[bin_index(query, num_bins, low, high)]


@partial(jax.jit, static_argnames=("num_bins",))
def count_bonus(query: jax.Array, data: jax.Array, num_bins: int, scale: float, exponent: float) -> jax.Array:
    """The bonus ``C / (N(x) + 1) ** M`` of the paper's equation (1) at each ``query`` point."""
    return optimism_bonus(counts_at(query, data, num_bins), scale, exponent)


# -------------------------------------------------------------------------------------- networks


def _torch_uniform(fan_in: int):
    """PyTorch's ``nn.Linear`` default: uniform on ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]``."""
    bound = 1.0 / np.sqrt(fan_in)
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


HEAD = "head"  # the output layer's name, as in the agent's networks


class ReluMLP(nn.Module):
    """A ReLU MLP with the output layer ``head``: PyTorch's default initialisation (``torch_init``) or flax's."""

    num_outputs: int
    hidden: Sequence[int] = (64, 64)
    torch_init: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, width in enumerate((*self.hidden, self.num_outputs)):
            init = _torch_uniform(x.shape[-1])
            inits = dict(kernel_init=init, bias_init=init) if self.torch_init else {}
            x = nn.Dense(width, **inits, name=HEAD if i == len(self.hidden) else None)(x)
            x = nn.relu(x) if i < len(self.hidden) else x
        return x


def make_network(hidden: Sequence[int], init: str = "torch") -> nn.Module:
    """A 1 -> hidden... -> 1 ReLU MLP (output layer ``head``), PyTorch-style or flax-default initialised."""
    if init not in ("torch", "flax"):
        raise ValueError(f"unknown init {init!r}; choose torch or flax")
    return ReluMLP(num_outputs=1, hidden=tuple(hidden), torch_init=init == "torch")


def set_final_bias(params: chex.ArrayTree, bias: float) -> chex.ArrayTree:
    """``params`` with every entry of the output layer's bias set to ``bias``: the optimistic initialisation."""
    head = params["params"][HEAD]
    return {**params, "params": {**params["params"], HEAD: {**head, "bias": jnp.full_like(head["bias"], bias)}}}


@partial(quick_jit, static_argnames=("network",))
def init_networks(network: nn.Module, keys: jax.Array, final_bias: float) -> chex.ArrayTree:
    """Stacked parameters of ``len(keys)`` networks, each with its final-layer bias set to ``final_bias``."""
    def init_one(key):
        return set_final_bias(network.init(key, jnp.zeros((1, 1))), final_bias)
    return jax.vmap(init_one)(keys)


def predict(network: nn.Module, params: chex.ArrayTree, x: jax.Array) -> jax.Array:
    """One network's outputs at inputs ``x`` of shape ``[N]``; shape ``[N]``."""
    return network.apply(params, x[:, None])[:, 0]


@partial(jax.jit, static_argnames=("network",))
def predict_all(network: nn.Module, stacked_params: chex.ArrayTree, x: jax.Array) -> jax.Array:
    """All networks' outputs at ``x``; shape ``[num_networks, N]``."""
    return jax.vmap(predict, in_axes=(None, 0, None))(network, stacked_params, x)


def mse(network: nn.Module, params: chex.ArrayTree, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean squared error of one network on ``(x, y)``."""
    return jnp.mean((predict(network, params, x) - y) ** 2)


@partial(jax.jit, static_argnames=("network", "steps"))
def train_networks(network: nn.Module, stacked_params: chex.ArrayTree, x: jax.Array, y: jax.Array, steps: int,
                   lr: float) -> tuple[chex.ArrayTree, jax.Array]:
    """Full-batch Adam on the MSE for every network at once; returns trained params and losses ``[nets, steps]``.

    One compiled program: ``vmap`` over the stacked parameters of a ``lax.scan`` over the steps.
    """
    optimiser = optax.adam(lr)

    def train_one(params):
        def step(carry, _):
            p, opt_state = carry
            loss, grads = jax.value_and_grad(lambda q: mse(network, q, x, y))(p)
            updates, opt_state = optimiser.update(grads, opt_state, p)
            return (optax.apply_updates(p, updates), opt_state), loss

        (params, _), losses = jax.lax.scan(step, (params, optimiser.init(params)), None, length=steps)
        return params, losses

    return jax.vmap(train_one)(stacked_params)


# --------------------------------------------------------------------------------------- numbers


@jax.jit
def far_mask(grid: jax.Array, data: jax.Array, distance: float) -> jax.Array:
    """True at grid points whose nearest data point is at least ``distance`` away."""
    return jnp.min(jnp.abs(grid[:, None] - data[None, :]), axis=1) >= distance


def summarise(args: Args, x: jax.Array, y: jax.Array, grid: jax.Array, init_grid: jax.Array,
              trained_grid: jax.Array, trained_at_data: jax.Array, losses: jax.Array) -> dict:
    """The JSON numbers: predictions and their spread at vs far from the data, fit quality, bonus sizes."""
    far = np.asarray(far_mask(grid, x, args.far_distance))
    trained_grid, trained_at_data, init_grid = map(np.asarray, (trained_grid, trained_at_data, init_grid))
    final_mse = np.mean((trained_at_data - np.asarray(y)[None]) ** 2, axis=1)  # after the last update
    spread_far = float(np.mean(np.std(trained_grid[:, far], axis=0)))
    spread_data = float(np.mean(np.std(trained_at_data, axis=0)))
    numbers = {
        "num_training_points": int(x.shape[0]),
        "far_grid_points": int(far.sum()),
        "init_mean_prediction": float(init_grid.mean()),
        "init_mean_prediction_at_data_inputs": float(np.mean(np.interp(np.asarray(x), np.asarray(grid),
                                                                       init_grid.mean(0)))),
        "final_train_mse_per_network": [float(v) for v in final_mse],
        "final_train_mse_max": float(final_mse.max()),
        "first_step_train_mse_mean": float(np.asarray(losses[:, 0]).mean()),
        "mean_target": float(np.mean(np.asarray(y))),
        "trained_mean_prediction_at_data": float(trained_at_data.mean()),
        "trained_mean_prediction_far": float(trained_grid[:, far].mean()),
        "trained_min_prediction_far": float(trained_grid[:, far].min()),
        "trained_max_prediction_far": float(trained_grid[:, far].max()),
        "trained_spread_at_data": spread_data,
        "trained_spread_far": spread_far,
        "spread_ratio_far_over_data": spread_far / max(spread_data, 1e-12),
        "fraction_of_networks_below_init_bias_far": float(np.mean(trained_grid[:, far].mean(1) < args.final_bias)),
    }
    for bins in (args.bins, args.coarse_bins):
        bonus_grid = np.asarray(count_bonus(grid, x, bins, args.bonus_scale, args.bonus_exponent))
        bonus_data = np.asarray(count_bonus(x, x, bins, args.bonus_scale, args.bonus_exponent))
        numbers[f"bonus_{bins}_bins"] = {
            "max_at_data": float(bonus_data.max()),
            "mean_at_data": float(bonus_data.mean()),
            "mean_far": float(bonus_grid[far].mean()),
            "fraction_of_grid_with_full_bonus": float(np.mean(bonus_grid == args.bonus_scale)),
            "nonempty_bins": int(np.sum(np.asarray(histogram_counts(x, bins)) > 0)),
        }
    return numbers


# -------------------------------------------------------------------------------------- plotting


def _data(ax, x, y):
    ax.scatter(np.asarray(x), np.asarray(y), s=14, color="tab:blue", zorder=5, label="data")


def caption(args: Args, drawn: str) -> str:
    """A figure's caption: the data, the networks (their number and seed), the training steps and the precision,
    and which networks are drawn (each on its own: there is no statistic across them)."""
    points = len(args.clusters) * args.points_per_cluster
    widths = "-".join(str(w) for w in (1, *args.hidden, 1))
    return (f"1-D regression, {points} points; {args.num_networks} ReLU MLPs {widths} (seed {args.seed}), "
            f"{args.steps:,} full-batch Adam steps, {PRECISION}\n{drawn}")


def plot_left(path: Path, grid, init_grid, trained_grid, x, y, final_bias: float, note: str) -> None:
    """Figure 2 (left): the networks at initialisation (green) and after training (red), with the data."""
    fig = Figure(figsize=(5.5, 4.4))
    ax = fig.subplots()
    for i, (g0, g1) in enumerate(zip(np.asarray(init_grid), np.asarray(trained_grid))):
        ax.plot(grid, g0, color="tab:green", alpha=0.7, lw=1.2, label="initialisation" if i == 0 else None)
        ax.plot(grid, g1, color="tab:red", alpha=0.7, lw=1.2, label="trained" if i == 0 else None)
    _data(ax, x, y)
    ax.axhline(final_bias, color="grey", lw=0.6, ls=":")
    ax.set(xlim=(LOW, HIGH), xlabel="x", ylabel="network output",
           title=f"{len(init_grid)} networks, final-layer bias initialised at {final_bias:g}")
    ax.legend(loc="best", fontsize=8)
    fig.suptitle(note, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def _bonus_panel(ax, grid, prediction, x, y, bins: int, scale: float, exponent: float) -> None:
    """One trained network, its output plus the count bonus, and the bin counts on a twin axis."""
    bonus = np.asarray(count_bonus(grid, x, bins, scale, exponent))
    counts = np.asarray(histogram_counts(x, bins))
    edges = np.linspace(LOW, HIGH, bins + 1)
    twin = ax.twinx()
    twin.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="grey", alpha=0.18, lw=0)
    twin.set_ylabel("training inputs per bin", color="grey")
    twin.set_ylim(0, max(counts.max(), 1) * 4)
    ax.set_zorder(twin.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.plot(grid, prediction, color="tab:red", lw=1.5, label="trained network f(x)")
    # dashed: at the data the bonus is almost 0 and this line lies on f(x)
    ax.plot(grid, prediction + bonus, color="tab:purple", lw=1.5, ls="--",
            label=f"f(x) + {scale:g}/(N(x)+1)^{exponent:g}")
    _data(ax, x, y)
    ax.set(xlim=(LOW, HIGH), xlabel="x", ylabel="output", title=f"count bonus, {bins} bins over [-2, 2]")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)


def plot_right(path: Path, grid, prediction, x, y, bins: int, scale: float, exponent: float, note: str) -> None:
    """Figure 2 (right): one trained network with the count-based optimistic bonus added."""
    fig = Figure(figsize=(5.5, 4.8))
    _bonus_panel(fig.subplots(), grid, prediction, x, y, bins, scale, exponent)
    fig.suptitle(note, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def plot_granularity(path: Path, grid, prediction, x, y, bins: Sequence[int], scale: float, exponent: float,
                     note: str) -> None:
    """Appendix figure: the same bonus with each number of bins in ``bins``, side by side."""
    fig = Figure(figsize=(5.5 * len(bins), 4.7))
    for ax, b in zip(np.atleast_1d(fig.subplots(1, len(bins), sharey=True)), bins):
        _bonus_panel(ax, grid, prediction, x, y, b, scale, exponent)
    fig.suptitle(note, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


# ------------------------------------------------------------------------------------------ main


def main(args: Args) -> dict:
    """Builds the data, trains the networks, writes the three figures and the JSON; returns the numbers."""
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    key_data, key_nets = jax.random.split(jax.random.PRNGKey(args.seed))
    x, y = make_dataset(key_data, args.clusters, args.cluster_width, args.points_per_cluster, args.noise)
    grid = jnp.linspace(LOW, HIGH, args.grid_points)

    network = make_network(args.hidden, args.init)
    init_params = init_networks(network, jax.random.split(key_nets, args.num_networks), args.final_bias)
    trained, losses = train_networks(network, init_params, x, y, args.steps, args.lr)
    init_grid = predict_all(network, init_params, grid)
    trained_grid = predict_all(network, trained, grid)
    trained_at_data = predict_all(network, trained, x)
    chex.assert_shape([init_grid, trained_grid], (args.num_networks, args.grid_points))
    chex.assert_shape(losses, (args.num_networks, args.steps))

    shown = np.asarray(trained_grid[args.shown_network])
    paths = {
        "fig2_left": args.out / "fig2_left_optimistic_init.png",
        "fig2_right": args.out / "fig2_right_count_bonus.png",
        "granularity": args.out / "granularity_6_vs_50_bins.png",
        "json": args.out / "regression_illustration.json",
    }
    one = caption(args, f"network {args.shown_network} of the {args.num_networks} drawn, after training")
    plot_left(paths["fig2_left"], grid, init_grid, trained_grid, x, y, args.final_bias,
              caption(args, "every network drawn, before and after training"))
    plot_right(paths["fig2_right"], grid, shown, x, y, args.bins, args.bonus_scale, args.bonus_exponent, one)
    plot_granularity(paths["granularity"], grid, shown, x, y, (args.coarse_bins, args.bins), args.bonus_scale,
                     args.bonus_exponent, one)

    numbers = summarise(args, x, y, grid, init_grid, trained_grid, trained_at_data, losses)
    numbers["wall_clock_seconds"] = time.perf_counter() - start
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()}
    settings["target_function"] = "0.5 * sin(3 x) + N(0, noise^2)"
    settings["far_from_data"] = f"grid points at least {args.far_distance} from every training input"
    paths["json"].write_text(json.dumps({"settings": settings, "numbers": numbers}, indent=2) + "\n")

    for name, p in paths.items():
        print(f"{name:12s} -> {p}")
    print(f"wall-clock: {numbers['wall_clock_seconds']:.1f} s")
    return numbers


def cli() -> None:
    """Entry point: parse the options with tyro and run."""
    main(tyro.cli(Args))


if __name__ == "__main__":
    cli()
