"""What trained runs believe at every cell of an environment whose states can be listed (the chain, the maze).

Pure functions of a trainer and the runs' state, as the agent itself computes them: the Q-network's values and the
target network's, the visit counts through the agent's own count lookup, and the values OPIQ acts on and
bootstraps from, ``Q + C_action / (N + 1)^M`` and ``Q_target + C_bootstrap / (N + 1)^M``. The maze's value maps
(the paper's Figure 6) are drawn from them; ``opiq_jax.Results.cell_values`` is their public face.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from ..parts.optimism import optimism_bonus


def one_run_tables(trainer, run) -> dict[str, jax.Array]:
    """``q`` and ``q_target`` (float32[cells, A]) and, where the run counts, ``counts`` (int32[cells, A]) of one run
    (its ``RunState``, no runs axis), indexed by cell id; walls, where the environment has them, are included."""
    obs = trainer.stepping.cell_table_obs(run)
    q_values = trainer.network.apply
    tables = dict(q=q_values(trainer.agent.weights.master(run), obs).astype(jnp.float32),
                  q_target=q_values(run.target_params, obs).astype(jnp.float32))
    if run.counts is not None:
        columns = jax.vmap(lambda c: trainer.agent.count_columns(run, c))(trainer.stepping.env.all_compacts())
        tables["counts"] = jax.vmap(lambda cols: trainer.agent.counting.query_all(run.counts, cols))(columns)
        chex.assert_equal_shape([tables["q"], tables["counts"]])
    return tables


def optimistic_values(q: jax.Array, q_target: jax.Array, n: jax.Array, c_action, c_bootstrap,
                      m) -> dict[str, jax.Array]:
    """``acting`` and ``bootstrap`` values for tables ``[runs, cells, actions]``; the hyperparameters are per run."""
    chex.assert_rank([q, q_target, n], 3)
    per_run = lambda x: jnp.asarray(x, jnp.float32)[:, None, None]  # noqa: E731
    m = per_run(m)
    return dict(acting=q + optimism_bonus(n, per_run(c_action), m),
                bootstrap=q_target + optimism_bonus(n, per_run(c_bootstrap), m))


def cell_values(trainer, runs) -> dict[str, jax.Array]:
    """:func:`one_run_tables` of every run of ``runs`` (leading runs axis) and the values each acts on (``acting``)
    and bootstraps from (``bootstrap``): with the optimism bonus where the program has one and the run counts,
    otherwise ``q`` and ``q_target`` themselves."""
    if not trainer.stepping.has_cell_table:
        raise TypeError(f"{type(trainer.stepping.env).__name__}'s states cannot be listed: it declares no cell table")
    tables = jax.vmap(lambda run: one_run_tables(trainer, run))(runs)
    hp = runs.hparams
    if "counts" in tables and "c_action" in hp:
        return {**tables, **optimistic_values(tables["q"], tables["q_target"], tables["counts"], hp["c_action"],
                                              hp["c_bootstrap"], hp["m"])}
    return {**tables, "acting": tables["q"], "bootstrap": tables["q_target"]}
