"""``python -m experiments.paper.maze_value_maps`` (paper Figure 6 and the appendix bootstrap figure): one tiny run of
the script, its maps checked cell by cell against the values it saves, those against the run's own metrics, and a
second call that only redraws. The bonus itself is checked by hand in tests/test_cell_values.py."""

import json

import matplotlib.image
import numpy as np
import pytest

from experiments.paper import maze_value_maps as mv
from opiq_jax import read_metrics
from opiq_jax.envs.maze import MAZE_GOAL, MAZE_SIZE, MAZE_START, Maze

WALLS = Maze().walls
CELL = lambda r, c: r * MAZE_SIZE + c  # noqa: E731

# 300 steps: learning starts at step 65 and the target network (copied every 1000 steps) is still the initial one, so
# Q_target and Q differ. Exact counts make the count checks exact. No --log-every: none of 10k, 5k, 2k, 1k and 500
# divides 300, so the default is 300's largest divisor up to 10k, itself.
STEPS = 300
ARGV = ["--steps", str(STEPS), "--buffer-size", "1000", "--count-features", "exact", "--seed", "3", "--no-progress"]
FIGURES = ("maze_values_dqn_pc.png", "maze_values_opiq.png", "maze_bootstrap_values_opiq.png")


def panel_colours(fig) -> np.ndarray:
    """float[4 actions, 24, 24, 3]: the RGB map each of the figure's four panels shows."""
    return np.stack([ax.get_images()[0].get_array() for ax in fig.axes[:4]])


def expected_colours(maps: np.ndarray, visited: np.ndarray, vmax: float = 10.0) -> np.ndarray:
    """The maps as the docs say they are drawn: open cells grey at clip(value / vmax, 0, 1), visited ones blue, walls
    brown."""
    grey = np.repeat(np.clip(np.nan_to_num(maps / vmax), 0.0, 1.0)[..., None], 3, axis=-1)
    rgb = np.where(visited[None, ..., None], np.asarray(mv.VISITED_RGB), grey)
    return np.where(WALLS[None, ..., None], np.asarray(mv.WALL_RGB), rgb)


def check_values(v: dict) -> None:
    """The saved values are the ones each run acts and bootstraps with, at every cell."""
    wall_ids = WALLS.reshape(-1)
    for name in ("q", "q_target", "acting", "bootstrap"):
        assert np.isnan(v[name][:, wall_ids]).all() and np.isfinite(v[name][:, ~wall_ids]).all(), name
        assert v[name].shape == (2, 576, 4), name
        # the maps: cell id row * 24 + column, one map per action
        np.testing.assert_array_equal(v[f"{name}_maps"], np.moveaxis(v[name].reshape(2, 24, 24, 4), -1, 1))
    assert (v["counts"][:, wall_ids] == -1).all()
    q, q_target, n = v["q"][:, ~wall_ids], v["q_target"][:, ~wall_ids], v["counts"][:, ~wall_ids]
    acting, bootstrap = v["acting"][:, ~wall_ids], v["bootstrap"][:, ~wall_ids]
    # DQN + PC acts on plain Q; OPIQ on Q + 100 / (N + 1)^2 and bootstraps from Q_target + 0.01 / (N + 1)^2
    np.testing.assert_array_equal(acting[0], q[0])
    np.testing.assert_allclose(acting[1] - q[1], 100.0 / (n[1] + 1.0) ** 2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bootstrap[1] - q_target[1], 0.01 / (n[1] + 1.0) ** 2, rtol=1e-3, atol=1e-6)
    assert not np.allclose(q_target, q, atol=1e-3), "the bootstrap maps must come from the target network"


def check_counts(v: dict) -> None:
    """Exact counts: one increment per environment step, only at cells the run has been in."""
    n, visited = v["counts"], v["visited"]
    open_ids = ~WALLS.reshape(-1)
    np.testing.assert_array_equal(np.where(n > 0, n, 0).sum(axis=(1, 2)), [STEPS, STEPS])
    assert not ((n > 0).any(axis=-1) & ~visited).any()
    assert visited[:, CELL(*MAZE_START)].all() and not visited[:, WALLS.reshape(-1)].any()
    assert 10 < visited[:, open_ids].sum(axis=1).min() < 340
    # the frontier is optimistic for OPIQ: every never-tried pair at an open cell gets the full bonus
    fresh = (n[1] == 0) & open_ids[:, None]
    assert fresh.sum() > 500 and (v["acting"][1][fresh] >= v["q"][1][fresh] + 100.0 - 1e-3).all()


def test_a_tiny_run_draws_the_values_each_method_uses_and_a_second_call_only_redraws(tmp_path, drawn):
    out = tmp_path / "maze maps, ✓"  # a space, a comma and unicode in the folder's name
    info = mv.main(["--out", str(out), *ARGV])
    v = dict(np.load(out / mv.VALUES_FILE))
    assert list(v["methods"]) == ["dqn_pc", "opiq"] and (v["seed"] == 3).all() and int(v["step"]) == STEPS
    np.testing.assert_array_equal(v["walls"], WALLS)
    assert int(Maze().cell_id(np.array(MAZE_GOAL, np.int32))) == CELL(*MAZE_GOAL)  # the environment numbers cells so
    check_values(v)
    check_counts(v)

    # the start cell's values are the trainer's own metrics at the last step
    last = {(r["method"], r["metric"]): r["value"] for r in read_metrics(out) if r["step"] == STEPS}
    for i, method in enumerate(["dqn_pc", "opiq"]):
        assert v["q"][i, CELL(*MAZE_START)].max() == pytest.approx(last[(method, "q_start")], rel=1e-4, abs=1e-5)
        assert v["acting"][i, CELL(*MAZE_START)].max() == pytest.approx(last[(method, "qplus_start")], rel=1e-4,
                                                                        abs=1e-5)

    # three figures (DQN + PC does not bootstrap optimistically), each panel the saved map coloured as documented
    saved = json.loads((out / mv.INFO_FILE).read_text())
    assert info["files"][:3] == list(FIGURES) and not (out / "maze_bootstrap_values_dqn_pc.png").exists()
    assert saved["device"] and saved["seconds_per_invocation"][0] > 0 and saved["step_drawn"] == STEPS
    assert saved["log_every"] == STEPS
    visited = v["visited"].reshape(2, 24, 24)
    for fig, (run, maps) in zip(drawn, ((0, v["acting_maps"][0]), (1, v["acting_maps"][1]),
                                        (1, v["bootstrap_maps"][1])), strict=True):
        np.testing.assert_allclose(panel_colours(fig), expected_colours(maps, visited[run]))
    for name in FIGURES:  # and so in the PNGs: visited cells blue (PNG colours are quantised to 1/255)
        image = matplotlib.image.imread(out / name)
        assert np.all(np.abs(image[..., :3] - np.array(mv.VISITED_RGB)) < 0.01, axis=-1).sum() > 100, name

    # each map's title: the method's paper name, what it draws, the one run's seed and step, its precision and cells
    cells = saved["cells_visited"]
    line = "one run: seed 3, step 300, float32; {} of 340 cells visited (blue)"
    assert [fig._suptitle.get_text() for fig in drawn] == [
        "DQN + PC: Q(s, a), used for acting\n" + line.format(cells["dqn_pc"]),
        "OPIQ: Q+(s, a) = Q(s, a) + 100 / (N(s, a) + 1)^2, used for acting\n" + line.format(cells["opiq"]),
        "OPIQ: Q_target(s, a) + 0.01 / (N(s, a) + 1)^2, used for bootstrapping\n" + line.format(cells["opiq"])]

    # the same command again finds the run finished: it redraws the same maps from the same values
    drawn.clear()
    again = mv.main(["--out", str(out), *ARGV])
    assert len(again["seconds_per_invocation"]) == 2 and len(drawn) == 3
    second = np.load(out / mv.VALUES_FILE)
    for name in ("acting", "bootstrap", "counts"):
        np.testing.assert_array_equal(second[name], v[name])


def test_a_method_with_networks_of_its_own_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match="^maze_value_maps: error: methods \\['dqn_rnd'\\] are not drawn here"):
        mv.main(["--out", str(tmp_path), "--methods", "dqn_rnd"])
