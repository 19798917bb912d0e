"""experiments/maze_network_variants.py: every formulation computes the maze network of the trainer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.maze_network_variants import VARIANTS, inputs, main, variant


@pytest.mark.parametrize("name", VARIANTS)
def test_each_variant_is_the_trainers_maze_network(name):
    params, obs, _ = inputs(jax.random.key(1), runs=2, batch=3)
    expected = jax.vmap(variant("patches", jnp.float32))(params, obs)
    q = jax.vmap(variant(name, jnp.float32))(params, obs)
    assert q.shape == (2, 3, 4)
    np.testing.assert_allclose(q, expected, rtol=1e-5, atol=1e-5)
    grads = jax.grad(lambda p: jnp.sum(variant(name, jnp.float32)(p, obs[0])))(jax.tree.map(lambda x: x[0], params))
    expected_grads = jax.grad(lambda p: jnp.sum(variant("patches", jnp.float32)(p, obs[0])))(jax.tree.map(lambda x: x[0], params))
    for g, e in zip(jax.tree.leaves(grads), jax.tree.leaves(expected_grads)):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_script_times_every_variant_at_both_precisions(tmp_path):
    result = main(["--runs", "2", "--batch", "2", "--calls", "1", "--out", str(tmp_path)])
    assert {(r["variant"], r["dtype"]) for r in result["rows"]} == {(v, d) for v in VARIANTS for d in ("float32", "bfloat16")}
    assert all(r["max_relative_difference"] < 0.05 and r["forward_backward_ms"] > 0 for r in result["rows"])
    assert (tmp_path / "maze_network_variants.json").exists()
