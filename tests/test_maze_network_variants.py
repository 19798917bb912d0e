"""experiments/maze_network_variants.py: every formulation computes the maze network of the trainer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.maze_network_variants import VARIANTS, inputs, main, variant


def summed_q_grad(apply, params, obs):
    return jax.jit(jax.grad(lambda p: jnp.sum(apply(p, obs[0]))))(jax.tree.map(lambda x: x[0], params))


@pytest.fixture(scope="module")
def reference():
    """The inputs, and the trainer's network's (patches') values and gradients on them: computed once, every
    variant is compared with them."""
    params, obs, _ = jax.jit(inputs, static_argnums=(1, 2))(jax.random.key(1), 2, 3)
    expected = jax.jit(jax.vmap(variant("patches", jnp.float32)))(params, obs)
    return params, obs, expected, summed_q_grad(variant("patches", jnp.float32), params, obs)


@pytest.mark.parametrize("name", [v for v in VARIANTS if v != "patches"])  # patches is the reference
def test_each_variant_is_the_trainers_maze_network(name, reference):
    params, obs, expected, expected_grads = reference
    q = jax.jit(jax.vmap(variant(name, jnp.float32)))(params, obs)
    assert q.shape == (2, 3, 4)
    np.testing.assert_allclose(q, expected, rtol=1e-5, atol=1e-5)
    grads = summed_q_grad(variant(name, jnp.float32), params, obs)
    for g, e in zip(jax.tree.leaves(grads), jax.tree.leaves(expected_grads)):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_script_times_the_chosen_variants_beside_patches_at_both_precisions(tmp_path):
    # every variant's function is checked above; here the script's loop, table and file, on two of them
    result = main(["--runs", "2", "--batch", "2", "--calls", "1", "--variants", "space_to_depth", "--out", str(tmp_path)])
    assert [(r["variant"], r["dtype"]) for r in result["rows"]] == [
        (v, d) for d in ("float32", "bfloat16") for v in ("patches", "space_to_depth")]
    assert all(r["max_relative_difference"] < 0.05 and r["forward_backward_ms"] > 0 for r in result["rows"])
    assert (tmp_path / "maze_network_variants.json").exists()


def test_unknown_variant_is_refused():
    with pytest.raises(SystemExit, match="unknown --variants"):
        main(["--variants", "im2col"])
