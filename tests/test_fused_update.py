"""experiments/fused_update.py: the fused Pallas update (interpret mode here) equals the trainer's XLA path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.fused_update import gradient_norms, layer_inputs, main, pallas_update, xla_gram_update, xla_update
from opiq_jax.registry.environments import static_for_env


@pytest.mark.parametrize("gradient_scale", [1.0, 1e4])  # the clip inactive, then active
def test_fused_update_matches_the_trainers_optimiser(gradient_scale):
    static = static_for_env("chain")
    h, d, w, acc, lr = layer_inputs(jax.random.key(3), runs=3, batch=16, fan_in=32, fan_out=64)
    d = d * gradient_scale
    norms = jnp.sqrt(jnp.sum(jnp.einsum("rbk,rbn->rkn", h, d) ** 2, axis=(1, 2)))
    assert bool(jnp.all(norms > static.grad_clip)) == (gradient_scale > 1.0)
    np.testing.assert_allclose(gradient_norms(h, d), norms, rtol=1e-4)  # from the Gram matrices
    expected_w, expected_acc = xla_update(static, h, d, w, acc, lr)
    for fused_w, fused_acc in [pallas_update(static, h, d, w, acc, lr, tile_k=16, tile_n=32), xla_gram_update(static, h, d, w, acc, lr)]:
        np.testing.assert_allclose(fused_acc, expected_acc, rtol=1e-5, atol=1e-12)
        np.testing.assert_allclose(fused_w, expected_w, rtol=1e-5, atol=1e-7)
        assert not np.allclose(fused_w, w)  # the step moved the weights


def test_script_reports_every_variant(tmp_path):
    result = main(["--runs", "2", "--fan-in", "32", "--fan-out", "32", "--batch", "16", "--tiles", "16x32", "32x16",
                   "--calls", "1", "--out", str(tmp_path)])
    assert set(result["variants"]) == {"xla", "xla_gram", "pallas_16x32", "pallas_32x16"}
    assert all(v["max_relative_difference"] < 1e-5 for v in result["variants"].values())
    assert result["gram_norm_seconds"] > 0
    assert (tmp_path / "fused_update.json").exists()


@pytest.mark.parametrize("tiles", [["48x16"], ["16x64"], ["16by16"], ["8x16"]])  # not a power of 2, not dividing, bad form, too small
def test_bad_tiles_are_refused(tiles, tmp_path):
    with pytest.raises(SystemExit, match="--tiles"):
        main(["--runs", "1", "--fan-in", "32", "--fan-out", "32", "--batch", "16", "--tiles", *tiles, "--out", str(tmp_path)])
