"""The appendix's two tabular counterexamples, measured: how often each agent settles on the worse action.

Both MDPs have one state, two actions and H = 1; each agent runs 2,048 episodes for 400 seeds, and a
seed "settles on the worse action" when, over the last quarter of its episodes, its policy picks the
worse action more than half the time (the exact per-episode regret is the gap times that probability).
The procedure is the one ``tests/test_tabular.py`` checks with bounds; this script records the rates.

* Optimism during action selection: left pays 0.1, right pays 1. Greedy Q-learning on the pessimistic
  Q (with b_N) against OPIQ.
* The count bonus b_N: left pays 1 with probability a = 0.5 (else 0), right pays a / lambda = 0.25;
  p = 0.01, M = 1. OPIQ without b_N against OPIQ with it.

``python -m experiments.paper.tabular_counterexamples --out results/tabular-counterexamples`` writes
``counterexamples.json``, ``config.json`` and ``run_info.json`` (CPU, under a minute).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

# Run by path (python experiments/paper/tabular_counterexamples.py): import as python -m does, from the root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax
import jax.numpy as jnp
import numpy as np

from experiments.paper import tabular as T
from opiq_jax.reporting import portable, source_revision

EPISODES, SEEDS, KEY_SEED = 2048, 400, 7


def _one_state_mdp(rewards, bernoulli) -> T.TabularMDP:
    return T.stack_mdps([T.make_mdp(jnp.ones((1, 1, 2, 1)), jnp.array([[rewards]]), jnp.array([[bernoulli]]))])


def _keys(num_seeds: int, seed: int) -> jax.Array:
    keys = jax.random.split(jax.random.key(seed), num_seeds)
    return jax.random.key_data(keys).reshape(1, num_seeds, -1)


def settled_on_worse(config: T.TabularConfig, mdps, hp, gap: float, seeds: int = SEEDS) -> float:
    """Share of seeds whose policy picks the worse action more than half the time in the last quarter."""
    _, regrets = T.run_batched(config, mdps, hp, _keys(seeds, KEY_SEED))
    last = np.asarray(regrets)[0, 0, :, -config.num_episodes // 4:].mean(-1) / gap
    return float(np.mean(last > 0.5))


def measure(episodes: int = EPISODES, seeds: int = SEEDS) -> dict:
    acting = _one_state_mdp([0.1, 1.0], [False, False])
    hp = T.Hyperparams.create(M=[1.0], p=0.01, bonus_scale=2.0)
    greedy = settled_on_worse(T.TabularConfig(episodes, optimistic_acting=False), acting, hp, 0.9, seeds)
    opiq = settled_on_worse(T.TabularConfig(episodes), acting, hp, 0.9, seeds)
    p, a, lam, m = 0.01, 0.5, 2.0, 1.0
    bonus_mdp = _one_state_mdp([a, a / lam], [True, False])
    hp = T.Hyperparams.create(M=[m], p=p, bonus_scale=2.0)
    no_bonus = settled_on_worse(T.TabularConfig(episodes, use_bonus=False), bonus_mdp, hp, a - a / lam, seeds)
    with_bonus = settled_on_worse(T.TabularConfig(episodes), bonus_mdp, hp, a - a / lam, seeds)
    return dict(
        episodes=episodes, seeds=seeds, key_seed=KEY_SEED,
        optimistic_acting=dict(mdp="one state; left pays 0.1, right pays 1", M=1.0, p=0.01, bonus_scale=2.0,
                               greedy_pessimistic_q_learning=greedy, opiq=opiq),
        count_bonus=dict(mdp="one state; left pays 1 w.p. 0.5 (else 0), right pays 0.25", p=p, a=a, lam=lam, M=m,
                         bonus_scale=2.0, opiq_without_bonus=no_bonus, opiq=with_bonus))


def config(result: dict) -> dict:
    """The settings of a measurement: everything in ``result`` but the measured rates."""
    rates = {"greedy_pessimistic_q_learning", "opiq", "opiq_without_bonus"}
    return {k: ({kk: vv for kk, vv in v.items() if kk not in rates} if isinstance(v, dict) else v)
            for k, v in result.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/tabular-counterexamples")
    parser.add_argument("--episodes", type=int, default=EPISODES)
    parser.add_argument("--seeds", type=int, default=SEEDS)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = measure(args.episodes, args.seeds)
    seconds = time.perf_counter() - start
    (out / "counterexamples.json").write_text(json.dumps(result, indent=1))
    (out / "config.json").write_text(json.dumps(config(result), indent=1))
    device = jax.devices()[0]
    (out / "run_info.json").write_text(json.dumps(dict(
        device=(f"{device.platform.upper()} ({platform.processor() or platform.machine()}, "
                f"{jax.device_count()} JAX device)"),
        seconds=round(seconds, 2), jax=jax.__version__,
        command=f"python -m experiments.paper.tabular_counterexamples --out {portable(str(args.out))}",
        **source_revision()), indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
