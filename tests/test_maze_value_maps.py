"""Maze value maps (paper Figure 6 and the appendix bootstrap figure): how cells become maps, then one tiny
end-to-end run of the script (compiled once) checked against the run's own metrics. The bonus itself is checked by
hand in tests/test_cell_values.py."""

import json

import matplotlib.image
import numpy as np
import pytest

from experiments.paper import maze_value_maps as mv
from opiq_jax.envs.maze import MAZE_GOAL, MAZE_SIZE, MAZE_START, Maze
from opiq_jax.runs.results_folder import read_metrics

WALLS = Maze().walls
CELL = lambda r, c: r * MAZE_SIZE + c  # noqa: E731


def open_cell(r, c):
    assert not WALLS[r, c], f"({r}, {c}) is a wall: pick another cell for this test"
    return CELL(r, c)


# ------------------------------------------------------------------------------------ pure pieces


def test_cell_ids_are_placed_at_their_row_and_column_and_walls_masked():
    per_cell = np.arange(576 * 4, dtype=np.float64).reshape(576, 4)
    maps = mv.to_maps(per_cell, WALLS)
    assert maps.shape == (4, 24, 24)
    for r, c in (MAZE_START, MAZE_GOAL, (22, 4), (13, 22)):
        for a in range(4):
            assert maps[a, r, c] == open_cell(r, c) * 4 + a
    assert np.isnan(maps[:, WALLS]).all()
    assert np.isfinite(maps[:, ~WALLS]).all()
    assert (np.isfinite(maps).sum(axis=(1, 2)) == 340).all()
    # a runs axis in front is kept
    two = mv.to_maps(np.stack([per_cell, -per_cell]), WALLS)
    assert two.shape == (2, 4, 24, 24) and two[1, 3, 16, 5] == -(CELL(16, 5) * 4 + 3)
    rows, cols = mv.cell_rc([0, 25, 389, 575])
    np.testing.assert_array_equal(rows, [0, 1, 16, 23])
    np.testing.assert_array_equal(cols, [0, 1, 5, 23])
    # the environment numbers cells the same way
    env = Maze()
    assert int(env.cell_id(np.array(MAZE_GOAL, np.int32))) == CELL(*MAZE_GOAL)
    np.testing.assert_array_equal(np.asarray(env.all_compacts())[389], MAZE_GOAL)


def test_map_rgb_by_hand():
    values = np.full((24, 24), 2.5)
    values[WALLS] = np.nan
    for rc, v in (((1, 1), 5.0), ((1, 2), 20.0), ((2, 1), -3.0), ((2, 2), np.nan)):
        open_cell(*rc)
        values[rc] = v
    visited = np.zeros((24, 24), bool)
    open_cell(4, 4)
    visited[4, 4] = True
    visited[0, 0] = True  # a wall marked visited stays a wall
    rgb = mv.map_rgb(values, WALLS, visited, vmax=10.0)
    assert rgb.shape == (24, 24, 3)
    np.testing.assert_allclose(rgb[1, 1], [0.5, 0.5, 0.5])
    np.testing.assert_allclose(rgb[1, 2], [1.0, 1.0, 1.0])  # clipped to white
    np.testing.assert_allclose(rgb[2, 1], [0.0, 0.0, 0.0])  # clipped to black
    np.testing.assert_allclose(rgb[2, 2], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(rgb[4, 4], mv.VISITED_RGB)
    np.testing.assert_allclose(rgb[0, 0], mv.WALL_RGB)
    np.testing.assert_allclose(rgb[WALLS], np.broadcast_to(mv.WALL_RGB, (WALLS.sum(), 3)))
    half = mv.map_rgb(values, WALLS, visited, vmax=5.0, visited_alpha=0.5)
    np.testing.assert_allclose(half[4, 4], 0.5 * np.array([0.5, 0.5, 0.5]) + 0.5 * np.array(mv.VISITED_RGB))
    np.testing.assert_allclose(half[1, 1], [1.0, 1.0, 1.0])


def test_default_log_every_and_titles():
    assert mv.default_log_every(10_000) == 10_000
    assert mv.default_log_every(200_000) == 10_000
    assert mv.default_log_every(1_500) == 500
    assert mv.default_log_every(7) == 7
    assert mv.default_log_every(12_345) == 4_115
    line = mv.run_line(20_000, 3, "bfloat16", 120, 340)
    assert line == "one run: seed 3, step 20,000, bfloat16; 120 of 340 cells visited (blue)"
    title = mv.acting_title("opiq", 100.0, 2.0, line)
    assert title.startswith("OPIQ: Q+(s, a) = Q(s, a) + 100 / (N(s, a) + 1)^2") and title.endswith("\n" + line)
    assert mv.acting_title("dqn_pc", 0.0, 2.0, line).startswith("DQN + PC: Q(s, a), used for acting\n")
    bootstrap = mv.bootstrap_title("opiq", 0.01, 2.0, line)
    assert "+ 0.01 / (N(s, a) + 1)^2" in bootstrap and bootstrap.endswith(line)


# ------------------------------------------------------------------------------------ end to end

# 300 steps: learning starts at step 65 and the target network (copied every 1000 steps) is still
# the initial one, so Q_target and Q differ. Exact counts make the count checks exact.
STEPS = 300
ARGV = ["--steps", str(STEPS), "--log-every", "100", "--buffer-size", "1000", "--count-features", "exact", "--seed", "3",
        "--no-progress"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("maze_value_maps")
    info = mv.main(["--out", str(out), *ARGV])
    return out, info, dict(np.load(out / mv.VALUES_FILE))


def test_writes_the_three_figures_and_the_values(finished):
    out, info, values = finished
    for name in ("maze_values_dqn_pc.png", "maze_values_opiq.png", "maze_bootstrap_values_opiq.png"):
        image = matplotlib.image.imread(out / name)
        assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 300
        # visited cells are drawn in blue (PNG colours are quantised to 1/255)
        blue = np.all(np.abs(image[..., :3] - np.array(mv.VISITED_RGB)) < 0.01, axis=-1)
        assert blue.sum() > 100, name
        assert name in info["files"]
    assert not (out / "maze_bootstrap_values_dqn_pc.png").exists()  # DQN + PC does not bootstrap optimistically
    assert list(values["methods"]) == ["dqn_pc", "opiq"]
    assert (values["seed"] == 3).all() and int(values["step"]) == STEPS
    for name in ("q", "q_target", "acting", "bootstrap", "counts"):
        assert values[name].shape == (2, 576, 4), name
    assert values["acting_maps"].shape == (2, 4, 24, 24)
    np.testing.assert_array_equal(values["walls"], WALLS)
    info_file = json.loads((out / mv.INFO_FILE).read_text())
    assert info_file["device"] and info_file["seconds_per_invocation"][0] > 0 and info_file["step_drawn"] == STEPS


def test_values_are_the_ones_each_run_uses(finished):
    _, _, v = finished
    wall_ids = WALLS.reshape(-1)
    for name in ("q", "q_target", "acting", "bootstrap"):
        assert np.isnan(v[name][:, wall_ids]).all() and np.isfinite(v[name][:, ~wall_ids]).all(), name
    assert (v["counts"][:, wall_ids] == -1).all()
    q, q_target, n = v["q"][:, ~wall_ids], v["q_target"][:, ~wall_ids], v["counts"][:, ~wall_ids]
    acting, bootstrap = v["acting"][:, ~wall_ids], v["bootstrap"][:, ~wall_ids]
    # DQN + PC acts on plain Q; OPIQ on Q + 100 / (N + 1)^2 and bootstraps from Q_target + 0.01 / (N + 1)^2
    np.testing.assert_array_equal(acting[0], q[0])
    np.testing.assert_allclose(acting[1] - q[1], 100.0 / (n[1] + 1.0) ** 2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bootstrap[1] - q_target[1], 0.01 / (n[1] + 1.0) ** 2, rtol=1e-3, atol=1e-6)
    assert not np.allclose(q_target, q, atol=1e-3), "the bootstrap maps must come from the target network"
    # the maps hold the same numbers
    np.testing.assert_array_equal(v["acting_maps"][1, 2, 16, 5], v["acting"][1, CELL(16, 5), 2])


def test_counts_and_visited_cells_come_from_the_run(finished):
    _, _, v = finished
    n, visited = v["counts"], v["visited"]
    open_ids = ~WALLS.reshape(-1)
    # exact counts: one increment per environment step, only at cells the run has been in
    np.testing.assert_array_equal(np.where(n > 0, n, 0).sum(axis=(1, 2)), [STEPS, STEPS])
    tried = (n > 0).any(axis=-1)
    assert not (tried & ~visited).any()
    assert visited[:, CELL(*MAZE_START)].all() and not visited[:, WALLS.reshape(-1)].any()
    assert 10 < visited[:, open_ids].sum(axis=1).min() < 340
    # the frontier is optimistic for OPIQ: every never-tried pair at an open cell gets the full bonus
    fresh = (n[1] == 0) & open_ids[:, None]
    assert fresh.sum() > 500
    assert (v["acting"][1][fresh] >= v["q"][1][fresh] + 100.0 - 1e-3).all()


def test_start_values_match_the_trainers_own_metrics(finished):
    out, _, v = finished
    last = {(r["method"], r["metric"]): r["value"] for r in read_metrics(out) if r["step"] == STEPS}
    start = CELL(*MAZE_START)
    for i, method in enumerate(["dqn_pc", "opiq"]):
        assert v["q"][i, start].max() == pytest.approx(last[(method, "q_start")], rel=1e-4, abs=1e-5)
        assert v["acting"][i, start].max() == pytest.approx(last[(method, "qplus_start")], rel=1e-4, abs=1e-5)


def test_running_again_resumes_and_only_redraws(finished, monkeypatch):
    out, _, values = finished
    titles, draw = [], mv.draw_maps
    monkeypatch.setattr(mv, "draw_maps", lambda path, maps, walls, visited, title, *a: titles.append(title)
                        or draw(path, maps, walls, visited, title, *a))
    info = mv.main(["--out", str(out), *ARGV])
    # each map's title: the method's paper name, the one run's seed and step, and the precision of its config
    assert [t.split(":")[0] for t in titles] == ["DQN + PC", "OPIQ", "OPIQ"]
    assert all(f"one run: seed 3, step {STEPS}, float32;" in t for t in titles), titles
    assert len(info["seconds_per_invocation"]) == 2
    again = np.load(out / mv.VALUES_FILE)
    for name in ("acting", "bootstrap", "counts"):
        np.testing.assert_array_equal(again[name], values[name])
