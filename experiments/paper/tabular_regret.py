"""Cumulative regret of tabular OPIQ, UCB-H and pessimistic greedy Q-learning on random MDPs.

Runs, on the same random finite-horizon MDPs and with the same seeds (common random numbers):

* OPIQ (Algorithm 1 of the paper) for each ``M`` in ``--opiq-m``;
* UCB-H (Jin et al., 2018): optimistic initialisation at ``H``, greedy on ``Q``;
* Q-learning with the same ``b_N`` but pessimistic initialisation, greedy on plain ``Q`` and
  bootstrapping from plain ``Q``.

Regret is exact: ``V*_1(s_1) - V^{pi_k}_1(s_1)`` for the policy the agent acts with in episode ``k``.
Writes to ``--out``: ``regret.png`` (log-log median cumulative regret over MDPs x seeds with 25-75%
bands), ``regret.csv`` and ``regret.md`` (final cumulative regret and the log-log slope of the median
over the last decade of episodes, ``[K/10, K]``), and ``config.json``; the Markdown table is also
printed.

    python -m experiments.paper.tabular_regret --out results/tabular
    python -m experiments.paper.tabular_regret --out /tmp/tabular --quick

Uses only the public API: ``opiq_jax.reporting``, for the methods' (colour, line style) and drawing order, as every
figure has them.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import pathlib
import sys
import time

if not __package__:  # run by path (python experiments/paper/tabular_regret.py): import as python -m does, from the root
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tyro  # noqa: E402
from tqdm import tqdm  # noqa: E402

from experiments.paper import tabular as T  # noqa: E402
from opiq_jax.reporting import group_styles, line_zorder  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Args:
    """Tabular regret experiment."""

    out: pathlib.Path = pathlib.Path("results/tabular")
    """Output directory (created if missing)."""
    num_states: int = 10
    """S, states per random MDP."""
    num_actions: int = 3
    """A, actions per state."""
    horizon: int = 10
    """H, steps per episode."""
    num_mdps: int = 8
    """Number of random MDPs."""
    num_seeds: int = 8
    """Agent seeds per MDP (runs = num_mdps x num_seeds)."""
    num_episodes: int = 40_960
    """K, episodes per run (also sets T = K H inside b_N)."""
    chunk: int = 2_048
    """Episodes per jitted call; progress is reported per chunk (multiples of 256 compile fastest)."""
    opiq_m: tuple[float, ...] = (0.5, 1.0, 2.0, 10.0)
    """Values of OPIQ's exponent M in H / (N + 1)^M."""
    bonus_scale: float = 0.01
    """c in b_N = c sqrt(H^3 log(SAT/p) / N), shared by all methods. The paper's c = 2 gives
    b_1 of about 280 >> H at the default size, so every method stays in the bonus-dominated,
    linear-regret phase for the whole run (measured slope about 1.0 for all); 0.01 gives b_1 of about 1.4."""
    p: float = 0.05
    """Failure probability p inside log(SAT/p)."""
    dirichlet_alpha: float = 1.0
    """Concentration of the Dirichlet prior over each P_t(. | s, a)."""
    bernoulli_rewards: bool = True
    """Bernoulli rewards with the sampled means (else deterministic rewards)."""
    time_homogeneous: bool = False
    """Use one (P, R) for all timesteps instead of time-dependent P_t, R_t."""
    seed: int = 0
    """Seed for the MDPs and the agents."""
    quick: bool = False
    """Sub-minute smoke run: 2048 episodes, 4 MDPs x 4 seeds (overrides those options)."""

    def resolved(self) -> "Args":
        if not self.quick:
            return self
        return dataclasses.replace(self, num_episodes=2_048, chunk=1_024, num_mdps=4, num_seeds=4)


@dataclasses.dataclass(frozen=True)
class Method:
    """One curve: a static config, one hyperparameter setting and labels."""

    label: str
    config: T.TabularConfig
    M: float | None  # None where M plays no role


def methods(args: Args) -> list[Method]:
    """OPIQ for every M, UCB-H, and pessimistic greedy Q-learning with b_N."""
    K = args.num_episodes
    opiq = T.TabularConfig(K, algorithm="opiq")
    greedy = T.TabularConfig(K, algorithm="opiq", optimistic_acting=False, optimistic_bootstrap=False)
    return [
        *(Method(f"OPIQ (M={m:g})", opiq, m) for m in args.opiq_m),
        Method("UCB-H", T.TabularConfig(K, algorithm="ucb_h"), None),
        Method("Q-learning + b_N (pessimistic init, greedy)", greedy, None),
    ]


def make_mdps(args: Args, key: jax.Array) -> T.TabularMDP:
    keys = jax.random.split(key, args.num_mdps)
    return T.stack_mdps(
        [
            T.random_mdp(
                k,
                args.num_states,
                args.num_actions,
                args.horizon,
                dirichlet_alpha=args.dirichlet_alpha,
                bernoulli_rewards=args.bernoulli_rewards,
                time_homogeneous=args.time_homogeneous,
            )
            for k in keys
        ]
    )


def run_group(
    args: Args, config: T.TabularConfig, group: list[Method], mdps: T.TabularMDP, keys: jax.Array
) -> np.ndarray:
    """Runs every method sharing ``config`` in one vmapped batch; regrets ``[n_methods, n_mdp, n_seed, K]``."""
    hp = T.Hyperparams.create(
        M=[m.M if m.M is not None else 1.0 for m in group], p=args.p, bonus_scale=args.bonus_scale
    )
    states = T.init_states_batched(config, mdps, hp, keys)
    regrets = np.empty((len(group), args.num_mdps, args.num_seeds, args.num_episodes), np.float32)
    done = 0
    label = ", ".join(m.label for m in group)
    with tqdm(total=args.num_episodes, desc=label, unit="ep", leave=True) as bar:
        while done < args.num_episodes:
            n = min(args.chunk, args.num_episodes - done)
            states, r = T.run_episodes_batched(config, mdps, hp, states, n)
            regrets[..., done : done + n] = np.asarray(r)
            done += n
            bar.update(n)
    return regrets


def loglog_slope(curve: np.ndarray) -> float:
    """Least-squares slope of log10 R(k) on log10 k over k in [K/10, K], at log-spaced k (so every
    part of the decade weighs equally)."""
    K = curve.shape[-1]
    ks = np.unique(np.geomspace(max(K // 10, 1), K, 200).round().astype(int))
    return float(np.polyfit(np.log10(ks), np.log10(np.maximum(curve[ks - 1], 1e-12)), 1)[0])


def summarise(labels, Ms, cumulative: np.ndarray) -> list[dict]:
    """Per method: final cumulative regret (median, quartiles over runs) and the slope of the median."""
    rows = []
    for label, M, cum in zip(labels, Ms, cumulative):
        q25, med, q75 = np.percentile(cum, [25, 50, 75], axis=0)
        rows.append(
            dict(
                method=label,
                M="" if M is None else f"{M:g}",
                final_regret_median=float(med[-1]),
                final_regret_q25=float(q25[-1]),
                final_regret_q75=float(q75[-1]),
                slope_last_decade=loglog_slope(med),
            )
        )
    return rows


def markdown_table(rows: list[dict], K: int) -> str:
    lines = [
        f"| method | M | cumulative regret at K={K} (median [25%, 75%]) | log-log slope on [K/10, K] |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['M']} | {r['final_regret_median']:.1f} "
            f"[{r['final_regret_q25']:.1f}, {r['final_regret_q75']:.1f}] | {r['slope_last_decade']:.3f} |"
        )
    return "\n".join(lines)


PRECISION = "float32"
"""The agents' precision (experiments.paper.tabular: Q tables, bonuses and each episode's regret in float32; only the
cumulative sums are float64), for the figure's title."""


def regret_title(args: Args, runs: int) -> str:
    """The figure's title: the MDPs, the runs and episodes behind every curve, c, the precision and the statistic."""
    K = args.num_episodes
    return (f"Random MDPs S={args.num_states}, A={args.num_actions}, H={args.horizon}; c={args.bonus_scale:g}; "
            f"{PRECISION}\n{args.num_mdps} MDPs x {args.num_seeds} seeds = {runs} runs per method, {K:,} episodes "
            f"({K * args.horizon:,} steps) each\n"
            f"median cumulative regret across the {runs} runs, 25-75% band (drawn at log-spaced episodes)")


PLOTTED_EPISODES = 400
"""Log-spaced episodes the curves are drawn at (fewer once rounded to whole episodes)."""


def plot(labels, cumulative: np.ndarray, args: Args, path: pathlib.Path) -> None:
    """Median and 25-75% band per method, each with its own (colour, line style): OPIQ with a large M and UCB-H
    lie on one another, and the broken line drawn over the solid one leaves both visible."""
    K = cumulative.shape[-1]
    ks = np.unique(np.geomspace(1, K, PLOTTED_EPISODES).round().astype(int))
    fig, ax = plt.subplots(figsize=(7, 5))
    for label, cum, (colour, style) in zip(labels, cumulative, group_styles(len(labels))):
        q25, med, q75 = np.percentile(cum[:, ks - 1], [25, 50, 75], axis=0)
        ax.plot(ks, med, label=label, color=colour, ls=style, zorder=line_zorder(style))
        ax.fill_between(ks, q25, q75, color=colour, alpha=0.2, linewidth=0)
    ax.axvspan(K / 10, K, color="grey", alpha=0.08, label="slope window [K/10, K]")
    ax.set(xscale="log", yscale="log", xlabel="episode k", ylabel="cumulative regret",
           title=regret_title(args, cumulative.shape[1]))
    ax.title.set_fontsize(8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, handlelength=3.2)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def main(args: Args) -> list[dict]:
    args = args.resolved()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    k_mdp, k_agent = jax.random.split(jax.random.key(args.seed))
    mdps = make_mdps(args, k_mdp)
    agent_keys = jax.random.key_data(jax.random.split(k_agent, args.num_mdps * args.num_seeds))
    agent_keys = agent_keys.reshape(args.num_mdps, args.num_seeds, -1)

    all_methods = methods(args)
    groups: dict[T.TabularConfig, list[Method]] = {}
    for m in all_methods:
        groups.setdefault(m.config, []).append(m)
    regrets, timings = {}, {}
    for config, group in groups.items():
        t0 = time.time()
        for m, r in zip(group, run_group(args, config, group, mdps, agent_keys)):
            regrets[m.label] = r
        timings[", ".join(m.label for m in group)] = round(time.time() - t0, 1)

    labels = [m.label for m in all_methods]
    Ms = [m.M for m in all_methods]
    per_run = [regrets[lbl].reshape(-1, args.num_episodes) for lbl in labels]  # [runs, K] each
    cumulative = np.stack([np.cumsum(r, -1, dtype=np.float64) for r in per_run])
    rows = summarise(labels, Ms, cumulative)
    table = markdown_table(rows, args.num_episodes)

    plot(labels, cumulative, args, args.out / "regret.png")
    with open(args.out / "regret.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (args.out / "regret.md").write_text(table + "\n")
    H, S, A, K = args.horizon, args.num_states, args.num_actions, args.num_episodes
    log_term = math.log(S * A * K * H / args.p)
    config = dict(
        **{k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in dataclasses.asdict(args).items()},
        derived=dict(
            T=K * H,
            runs_per_method=args.num_mdps * args.num_seeds,
            b_1=args.bonus_scale * math.sqrt(H**3 * log_term),
            log_SAT_over_p=log_term,
            slope_window=[K // 10, K],
        ),
        methods=[dict(label=m.label, M=m.M, config=dataclasses.asdict(m.config)) for m in all_methods],
        seconds_per_group=timings,
        wall_clock_seconds=round(time.time() - start, 1),
        jax_version=jax.__version__,
        jax_backend=jax.default_backend(),
    )
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(table)
    seconds = config["wall_clock_seconds"]
    print(f"wrote {args.out}/regret.png, regret.csv, regret.md, config.json in {seconds} s")
    return rows


if __name__ == "__main__":
    main(tyro.cli(Args))
