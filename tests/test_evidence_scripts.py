"""The small scripts that compute the documentation's evidence: far-end counts, SimHash aliasing, install size."""

import numpy as np

from experiments.paper.chain_far_end import far_end_counts, per_seed_maxima
from experiments.bench.install_size import closure, requirement_names
from experiments.studies.simhash_aliasing import chain_observations, codes, distinct, same_as_previous


def _row(method, seed, metric, value):
    return {"method": method, "seed": str(seed), "metric": metric, "value": str(value)}


def test_far_end_counts_a_seed_once_its_best_return_reaches_one():
    rows = [_row("a", 0, "max_return", 0.1), _row("a", 0, "max_return", 1.0), _row("a", 0, "states_visited", 10),
            _row("a", 1, "max_return", 0.9), _row("a", 1, "states_visited", 10), _row("b", 0, "loss", 5.0)]
    table = far_end_counts(per_seed_maxima(rows), chain_length=10)
    assert table == {"a": {"seeds": 2, "reached_far_end": 1, "visited_every_state": 2}}


def test_aliasing_counts_distinct_codes_and_left_neighbours():
    rows = np.array([[1], [1], [2], [3], [3], [3]], np.uint32)
    assert distinct(rows) == 3 and same_as_previous(rows) == 3
    import jax
    chain = chain_observations(8)
    assert chain.shape == (8, 8) and float(chain[3].sum()) == 4
    wide = codes(jax.random.PRNGKey(0), chain, 128)
    assert wide.shape == (8, 4) and distinct(wide) <= 8


def test_install_size_finds_the_core_requirements():
    core = closure(requirement_names("opiq-jax"))
    assert {"jax", "flax", "numpy"} <= core and "envpool" not in core
