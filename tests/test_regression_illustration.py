"""The 1-D regression illustration (paper Figure 2 and the granularity appendix figure)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tyro

from experiments.paper import regression_illustration as ri


def test_histogram_counts_by_hand():
    # 4 bins over [-2, 2]: edges -2, -1, 0, 1, 2; a left edge belongs to its bin, 2.0 to the last bin
    data = jnp.array([-2.0, -1.9, -0.1, 0.0, 0.5, 1.99, 2.0])
    np.testing.assert_array_equal(ri.histogram_counts(data, 4), [2, 1, 2, 2])
    np.testing.assert_array_equal(ri.bin_index(jnp.array([-2.0, -1.0, -0.5, 0.999, 2.0]), 4), [0, 1, 1, 2, 3])
    np.testing.assert_array_equal(ri.counts_at(jnp.array([-1.5, -0.5, 0.25, 1.5]), data, 4), [2, 1, 2, 2])
    np.testing.assert_array_equal(ri.histogram_counts(jnp.array([1.0]), 2), [0, 1])


def test_histogram_counts_match_numpy():
    data = jax.random.uniform(jax.random.PRNGKey(3), (200,), minval=-2.0, maxval=2.0)
    for bins in (6, 50):
        expected, _ = np.histogram(np.asarray(data), bins=bins, range=(-2.0, 2.0))
        np.testing.assert_array_equal(ri.histogram_counts(data, bins), expected)


def test_bonus_full_without_data_small_with_plenty():
    data = jnp.concatenate([jnp.full(99, -1.5), jnp.full(3, 0.5)])
    query = jnp.array([-1.5, 0.5, 1.5])  # 99 points, 3 points, none
    bonus = ri.count_bonus(query, data, 4, 3.0, 2.0)
    np.testing.assert_allclose(bonus, [3.0 / 100**2, 3.0 / 16, 3.0], rtol=1e-6)


# Fewer steps than the default 3000 keep the test fast; main is run with the same options below so that
# every compiled function is reused from the jit cache.
TEST_STEPS = 1500


@pytest.fixture(scope="module")
def trained():
    args = ri.Args(steps=TEST_STEPS)
    key_data, key_nets = jax.random.split(jax.random.PRNGKey(args.seed))
    x, y = ri.make_dataset(key_data, args.clusters, args.cluster_width, args.points_per_cluster, args.noise)
    network = ri.make_network(args.hidden, args.init)
    init = ri.init_networks(network, jax.random.split(key_nets, args.num_networks), args.final_bias)
    params, losses = ri.train_networks(network, init, x, y, args.steps, args.lr)
    return args, network, x, y, init, params, losses


def test_dataset_inside_range_and_bonus_on_the_empty_coarse_bins(trained):
    args, _, x, _, _, _, _ = trained
    assert x.shape == (len(args.clusters) * args.points_per_cluster,)
    assert float(x.min()) > -2.0 and float(x.max()) < 2.0
    # the module docstring promises that with 6 bins the 3rd and 6th bins hold no data
    counts = np.asarray(ri.histogram_counts(x, 6))
    assert counts[2] == 0 and counts[5] == 0 and counts.sum() == x.shape[0]


def test_init_is_optimistic_and_networks_fit_the_data(trained):
    args, network, x, y, init, params, losses = trained
    grid = jnp.linspace(-2.0, 2.0, args.grid_points)
    init_out = ri.predict_all(network, init, grid)
    np.testing.assert_allclose(init["params"][ri.HEAD]["bias"], args.final_bias)
    assert abs(float(init_out.mean()) - args.final_bias) < 0.5
    assert losses.shape == (args.num_networks, args.steps)
    mse = np.mean((np.asarray(ri.predict_all(network, params, x)) - np.asarray(y)) ** 2, axis=1)
    assert mse.shape == (args.num_networks,) and mse.max() < 0.02, mse
    np.testing.assert_allclose(mse, losses[:, -1], rtol=0.2)  # the last recorded loss is one step earlier


def test_networks_disagree_far_from_data_more_than_at_data(trained):
    args, network, x, _, _, params, _ = trained
    grid = jnp.linspace(-2.0, 2.0, args.grid_points)
    far = np.asarray(ri.far_mask(grid, x, args.far_distance))
    assert far.sum() > 50  # the three empty regions
    spread_far = np.std(np.asarray(ri.predict_all(network, params, grid)), axis=0)[far].mean()
    spread_data = np.std(np.asarray(ri.predict_all(network, params, x)), axis=0).mean()
    assert spread_far > 5 * spread_data, (spread_far, spread_data)


def test_far_mask_by_hand():
    mask = ri.far_mask(jnp.array([-2.0, -0.6, 0.0, 0.4, 2.0]), jnp.array([0.0, 0.1]), 0.5)
    np.testing.assert_array_equal(mask, [True, True, False, False, True])


def test_main_writes_figures_and_json(trained, tmp_path, capsys):
    args = tyro.cli(ri.Args, args=["--out", str(tmp_path), "--steps", str(TEST_STEPS)])
    assert args.steps == TEST_STEPS and args.num_networks == 10
    numbers = ri.main(args)
    for name in ("fig2_left_optimistic_init.png", "fig2_right_count_bonus.png", "granularity_6_vs_50_bins.png"):
        path = tmp_path / name
        assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((tmp_path / "regression_illustration.json").read_text())
    assert saved["settings"]["steps"] == TEST_STEPS and saved["settings"]["bins"] == 50
    assert saved["numbers"]["bonus_50_bins"]["mean_far"] == pytest.approx(3.0)
    assert len(numbers["final_train_mse_per_network"]) == 10
    assert numbers["spread_ratio_far_over_data"] > 5
    assert "wall-clock" in capsys.readouterr().out


def test_figures_state_data_networks_steps_and_precision(trained, tmp_path, monkeypatch):
    """Each figure's caption: the data, the networks and their seed, the steps, the precision and which networks are
    drawn; where the bonus is near 0 (at the data) its line, dashed, stays apart from the network's."""
    figures = []

    class Kept(ri.Figure):  # every figure main draws, kept for inspection
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            figures.append(self)

    monkeypatch.setattr(ri, "Figure", Kept)
    ri.main(ri.Args(out=tmp_path, steps=TEST_STEPS))
    assert len(figures) == 3
    setting = (f"1-D regression, 40 points; 10 ReLU MLPs 1-64-64-1 (seed 0), {TEST_STEPS:,} full-batch Adam steps, "
               "float32")
    left, right, granularity = (fig._suptitle.get_text() for fig in figures)
    assert left == f"{setting}\nevery network drawn, before and after training"
    assert right == granularity == f"{setting}\nnetwork 0 of the 10 drawn, after training"
    for ax in figures[2].axes[:2]:  # the two panels (their twin axes of counts come after them)
        network, bonus = ax.get_lines()[:2]
        assert network.get_linestyle() == "-" and bonus.get_linestyle() == "--"
        assert network.get_label() == "trained network f(x)" and bonus.get_label().startswith("f(x) + 3/")
