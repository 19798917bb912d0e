"""experiments/fused_update.py: the fused Pallas update (interpret mode here) equals the trainer's XLA path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.fused_update import gradient_norms, layer_inputs, main, pallas_update, xla_update
from opiq_jax.config import static_for_env


@pytest.mark.parametrize("gradient_scale", [1.0, 1e4])  # the clip inactive, then active
def test_fused_update_matches_the_trainers_optimiser(gradient_scale):
    static = static_for_env("chain")
    h, d, w, acc, lr = layer_inputs(jax.random.key(3), runs=3, batch=16, fan_in=32, fan_out=64)
    d = d * gradient_scale
    norms = jnp.sqrt(jnp.sum(jnp.einsum("rbk,rbn->rkn", h, d) ** 2, axis=(1, 2)))
    assert bool(jnp.all(norms > static.grad_clip)) == (gradient_scale > 1.0)
    np.testing.assert_allclose(gradient_norms(h, d), norms, rtol=1e-4)  # from the Gram matrices
    expected_w, expected_acc = xla_update(static, h, d, w, acc, lr)
    fused_w, fused_acc = pallas_update(static, h, d, w, acc, lr, tile=16)
    np.testing.assert_allclose(fused_acc, expected_acc, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(fused_w, expected_w, rtol=1e-5, atol=1e-7)
    assert not np.allclose(fused_w, w)  # the step moved the weights


def test_script_reports_both_variants(tmp_path):
    result = main(["--runs", "2", "--fan-in", "32", "--fan-out", "32", "--batch", "16", "--tile", "16",
                   "--calls", "1", "--out", str(tmp_path)])
    assert set(result["variants"]) == {"xla", "pallas"}
    assert all(v["max_relative_difference"] < 1e-5 for v in result["variants"].values())
    assert (tmp_path / "fused_update.json").exists()
