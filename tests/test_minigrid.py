"""MiniGrid's tasks through xminigrid (``envs/minigrid.py``, the ``minigrid`` extra): the adapter's episodes end at
the goal or the step limit and restart, its views step as xminigrid's own, the exact cell id is one per state (agent,
pocket, doors), ``--env minigrid:NAME`` trains from the API and the command line (navix's tasks too, with their own
exact ids), a KeyCorridor the installed navix cannot solve is refused, and a task no library gives, or the extra
missing, is one line."""

import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("xminigrid")

import opiq_jax  # noqa: E402 (after the skip: the module needs the extra)
from experiments.studies import suites  # noqa: E402
from opiq_jax.cli import main  # noqa: E402
from opiq_jax.envs.minigrid import door_tiles, make_minigrid, minigrid_tasks  # noqa: E402
from opiq_jax.registry.environments import static_for_env  # noqa: E402
from tests.missing_extras import hide_module  # noqa: E402
from tests.suite_runs import ONE_PROGRAM, SUITE_OPTIONS, SUITE_RUN, random_actions, train_methods  # noqa: E402

FORWARD, TURN_RIGHT, TURN_LEFT = 0, 1, 2  # xminigrid's first three actions


def test_the_tasks_named_are_xminigrids():
    tasks = minigrid_tasks()
    assert {"DoorKey-5x5", "DoorKey-16x16", "FourRooms", "Empty-5x5"} <= set(tasks)
    assert not any(t.startswith("KeyCorridor") for t in tasks)  # xminigrid 0.9 has none: navix gives them


def test_an_episode_ends_at_the_step_limit_and_restarts():
    env = make_minigrid("Empty-5x5")
    assert (env.obs_shape, env.num_actions, env.resets_itself) == ((7, 7, 2), 6, False)
    limit = env.default_params.max_steps_in_episode
    obs, state = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    first = np.asarray(obs)
    for t in range(limit):  # turning in place never reaches the goal
        obs, state, reward, terminated, truncated, info = step(jax.random.key(t), state, TURN_LEFT)
        assert bool(truncated) == (t == limit - 1) and not bool(terminated) and float(reward) == 0.0
    assert int(state.env_state.state.step_num) == 0  # restarted
    np.testing.assert_array_equal(np.asarray(obs), first)  # Empty starts the same way every time


def test_the_goal_ends_an_episode_as_a_termination_with_xminigrids_reward():
    env = make_minigrid("Empty-5x5")  # the agent starts at row 1, column 1 facing east; the goal is at (3, 3)
    _, state = env.reset(jax.random.key(0))
    actions = [FORWARD, FORWARD, TURN_RIGHT, FORWARD, FORWARD]  # east twice, turn to the south, south twice
    for t, action in enumerate(actions):
        _, state, reward, terminated, truncated, _ = env.step(jax.random.key(t), state, action)
    limit = env.default_params.max_steps_in_episode
    assert bool(terminated) and not bool(truncated)
    assert float(reward) == pytest.approx(1.0 - 0.9 * len(actions) / limit)


def test_minigrid_trains_from_the_api_with_the_mazes_settings(tmp_path):
    static = static_for_env("minigrid:DoorKey-5x5")
    assert (static.n_step, static.buffer_size, static.simhash_bits) == (3, 250_000, 128)
    out = tmp_path / "minigrid, ✓"
    # the experiment the command line trains below (its program compiled once for both)
    results = opiq_jax.train(env="minigrid:DoorKey-5x5", methods=list(ONE_PROGRAM), **SUITE_OPTIONS,
                             count_features="exact", out=out, progress=False, verbose=False)
    assert results.finished
    config = json.loads((out / "config.json").read_text())
    assert config["resolved"]["network"] == "mlp"  # the 7x7 view read whole
    with open(out / "metrics.csv", newline="") as f:
        assert any(r["metric"] == "states_visited" for r in csv.DictReader(f))


def test_an_unknown_task_gets_the_closest_names_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "minigrid:DoorKey-16x61", "--no-progress"])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "did you mean minigrid:DoorKey-16x16" in message


def test_without_the_extra_the_command_names_it(monkeypatch, capsys):
    hide_module(monkeypatch, "xminigrid")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "minigrid:Unlock", "--steps", "10", "--no-progress"])  # a task of xminigrid's alone
    assert exit_info.value.code == 2
    assert "pip install -e '.[minigrid]'" in capsys.readouterr().err


def walk(env, steps: int, runs: int, seed: int):
    """``runs`` random walks of ``steps`` steps through the adapter: every state reached, as its cell id and the
    library's state it came from (one compiled program: eager, the resets alone took 150 compiles)."""

    @jax.jit
    def walks(reset_key, walk_key):
        _, states = jax.vmap(env.reset)(jax.random.split(reset_key, runs))

        def body(states, key):
            k_act, k_step = jax.random.split(key)
            actions = jax.random.randint(k_act, (runs,), 0, env.num_actions)
            _, states, *_ = jax.vmap(env.step)(jax.random.split(k_step, runs), states, actions)
            return states, (states.compact, states.env_state.state)

        _, (compacts, inner) = jax.lax.scan(body, states, jax.random.split(walk_key, steps))
        inner = jax.tree.map(lambda x: x.reshape(steps * runs, *x.shape[2:]), inner)
        return jax.vmap(env.cell_id)(compacts.reshape(steps * runs, -1)), inner

    return walks(jax.random.key(seed), jax.random.key(seed + 1))


def test_minigrid_exact_cell_is_one_id_per_agent_pocket_and_doors():
    env = make_minigrid("DoorKey-5x5")
    assert env.state_cells and env.num_cells == 5 * 5 * 4 * 13 * 12 * 3
    cells, inner = walk(env, 400, 16, seed=0)
    cells = np.asarray(cells)
    door_state = jax.vmap(lambda grid: jnp.sum(jnp.where(*door_tiles(grid), 0)))(inner.grid)  # one door here
    doors = np.asarray(door_state)
    keys = np.column_stack([np.asarray(inner.agent.position), np.asarray(inner.agent.direction),
                            np.asarray(inner.agent.pocket), doors])
    by_cell, by_key = {}, {}
    for cell, key in zip(cells.tolist(), map(tuple, keys.tolist())):
        assert by_cell.setdefault(cell, key) == key  # one state per id
        assert by_key.setdefault(key, cell) == cell  # one id per state
    assert len(by_cell) > 50 and 0 <= cells.min() and cells.max() < env.num_cells
    assert len({k[-1] for k in by_key}) >= 2 and len({k[3:5] for k in by_key}) >= 2  # doors opened, keys carried


def test_minigrid_views_step_as_xminigrids_own_and_the_id_rides_after_them():
    import xminigrid

    env = make_minigrid("DoorKey-5x5")
    own, own_params = xminigrid.make("MiniGrid-DoorKey-5x5")
    obs, state = env.reset(jax.random.key(5))
    timestep = own.reset(own_params, jax.random.key(5))
    step, own_step = jax.jit(env.step), jax.jit(own.step)
    for action in random_actions(jax.random.key(6), 60, env.num_actions):
        obs, state, reward, *_ = step(jax.random.key(0), state, action)
        timestep = own_step(own_params, timestep, action)
        if int(timestep.step_type) == 2:  # the episode ended: the adapter reset it with keys of its own
            break
        np.testing.assert_array_equal(np.asarray(obs), np.asarray(timestep.observation, np.float32))
        assert float(reward) == float(timestep.reward)
        assert state.compact.shape == (7 * 7 * 2 + 1,)
        np.testing.assert_array_equal(np.asarray(env.obs_from_compact(state.compact)), np.asarray(obs))


def test_a_minigrid_task_with_too_many_doors_for_exact_ids_hashes_its_view():
    env = make_minigrid("LockedRoom")  # six doors on 19x19: 361 x 4 x 156 x 729 ids, past 2**24
    assert not env.state_cells and env.num_cells == 2**16 and env.compact_dim == env.obs_dim


def test_the_one_program_methods_train_a_few_hundred_steps_on_minigrid_with_exact_counts(tmp_path):
    # DORA's, RND's and BSP's programs train on MinAtar's grids (tests/test_minatar.py): a compile each, kept out of
    # CI's 15 minutes here
    out = tmp_path / "minigrid, ✓"
    assert train_methods("minigrid:DoorKey-5x5", ONE_PROGRAM, out, "--count-features", "exact") == set(ONE_PROGRAM)
    # the suites study on the same experiment: it resumes the finished run and reports, the success rate beside
    summary = suites.main(["--env", "minigrid:DoorKey-5x5", "--methods", *ONE_PROGRAM, *SUITE_RUN, "--out", str(out),
                           "--count-features", "exact"])
    assert {t["method"] for t in summary["score"]} == set(ONE_PROGRAM)
    assert all(0 <= t["success_rate"] <= 1 and t["seeds"] == 1 for t in summary["score"])
    assert "success rate of the final greedy episode" in (out / "summary.md").read_text()
    assert (out / "suite_states_visited.png").is_file() and "minigrid, ✓" in json.loads(
        (out / "run_info.json").read_text())["command"]


def navix_or_skip():
    return pytest.importorskip("navix")


def navix_version():
    from opiq_jax.envs.navix import navix_version

    return navix_version()


NAVIX_TASK = "DoorKey-Random-5x5"
"""A task xminigrid lacks, with a door and a key, solvable in every navix release the extra installs."""


def test_a_task_xminigrid_lacks_comes_from_navix_and_steps_as_navixs_own():
    navix = navix_or_skip()
    env = make_minigrid(NAVIX_TASK)
    own = navix.make(f"Navix-{NAVIX_TASK}-v0")
    assert (env.obs_shape, env.num_actions, env.resets_itself) == (own.observation_space.shape, 7, False)
    assert env.default_params.max_steps_in_episode == own.max_steps
    obs, state = jax.jit(env.reset)(jax.random.key(2))  # compiled: eager, the two resets took 90 compiles
    timestep = jax.jit(own.reset)(jax.random.key(2))
    np.testing.assert_array_equal(np.asarray(obs), np.asarray(timestep.observation, np.float32))
    step, own_step = jax.jit(env.step), jax.jit(own.step)
    for action in random_actions(jax.random.key(3), own.max_steps, env.num_actions):
        obs, state, reward, terminated, truncated, info = step(jax.random.key(0), state, action)
        timestep = own_step(timestep, action)
        view = np.asarray(info["compact"])[:env.obs_dim]  # the exact id rides after it
        np.testing.assert_array_equal(view.reshape(own.observation_space.shape), np.asarray(timestep.observation))
        assert float(reward) == float(timestep.reward)
        assert (bool(terminated), bool(truncated)) == (int(timestep.step_type) == 2, int(timestep.step_type) == 1)
        if int(timestep.step_type) > 0:
            break
    assert bool(truncated) or bool(terminated)  # a random walk ends, here or at navix's limit


def test_navix_exact_cell_is_one_id_per_player_pocket_and_open_doors():
    navix_or_skip()
    env = make_minigrid(NAVIX_TASK)  # 5x5 cells, one door, one key
    assert env.state_cells and env.num_cells == 5 * 5 * 4 * 2 * 2
    cells, inner = walk(env, 400, 16, seed=0)
    cells = np.asarray(cells)
    player, doors = inner.entities["player"], inner.entities["door"]
    keys = np.column_stack([np.asarray(player.position[:, 0]), np.asarray(player.direction),
                            np.asarray(player.pocket), np.asarray(doors.open) != 0])
    by_cell, by_key = {}, {}
    for cell, key in zip(cells.tolist(), map(tuple, keys.tolist())):
        assert by_cell.setdefault(cell, key) == key  # one state per id
        assert by_key.setdefault(key, cell) == cell  # one id per state
    assert len(by_cell) > 30 and 0 <= cells.min() and cells.max() < env.num_cells
    assert len({k[3] for k in by_key}) == 2 and len({k[4] for k in by_key}) == 2  # the key carried, the door opened


def test_a_keycorridor_navix_cannot_solve_is_refused_in_one_line(capsys):
    navix_or_skip()
    if navix_version() >= (0, 9, 5):
        pytest.skip("this navix's KeyCorridor can be solved")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "minigrid:KeyCorridorS3R1", "--steps", "10", "--no-progress"])
    assert exit_info.value.code == 2
    assert "KeyCorridor cannot be solved (its doors are wall cells of the grid)" in capsys.readouterr().err


def test_a_solvable_keycorridor_lets_the_agent_through_its_doors():
    navix_or_skip()
    if navix_version() < (0, 9, 5):
        pytest.skip("navix before 0.9.5 builds an unsolvable KeyCorridor")
    env = make_minigrid("KeyCorridorS3R1")
    _, inner = walk(env, 300, 16, seed=0)
    assert len({tuple(p) for p in np.asarray(inner.entities["player"].position[:, 0]).tolist()}) > 1


def test_the_one_program_methods_train_a_few_hundred_steps_on_a_navix_task(tmp_path):
    navix_or_skip()
    out = tmp_path / "navix"
    assert train_methods(f"minigrid:{NAVIX_TASK}", ONE_PROGRAM, out, "--count-features", "exact") == set(ONE_PROGRAM)


def test_without_navix_a_keycorridor_names_its_extra(monkeypatch, capsys):
    hide_module(monkeypatch, "navix")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "minigrid:KeyCorridorS3R3", "--steps", "10", "--no-progress"])
    assert exit_info.value.code == 2
    assert "pip install -e '.[navix]'" in capsys.readouterr().err
