"""The values a trained run acts on and bootstraps from at every cell (``Results.cell_values``): the bonus by
hand. The maze's value maps (tests/test_maze_value_maps.py) check them end to end against a run's own metrics."""

import types

import numpy as np
import pytest

from opiq_jax.agent.cell_values import cell_values, optimistic_values


def test_acting_and_bootstrap_values_add_each_runs_own_bonus_by_hand():
    q = np.zeros((2, 6, 4), np.float32)
    q_target = np.full((2, 6, 4), 0.5, np.float32)
    n = np.zeros((2, 6, 4), np.int32)
    q[:, 1] = [1.0, 2.0, 3.0, 4.0]
    n[:, 1] = [0, 1, 4, 9]
    # run 0: DQN + PC (no optimism), run 1: OPIQ's maze setting C_action 100, C_bootstrap 0.01, M 2
    values = optimistic_values(q, q_target, n, np.array([0.0, 100.0]), np.array([0.0, 0.01]), np.array([2.0, 2.0]))
    acting, bootstrap = np.asarray(values["acting"]), np.asarray(values["bootstrap"])
    np.testing.assert_array_equal(acting[0], q[0])
    np.testing.assert_array_equal(bootstrap[0], q_target[0])
    np.testing.assert_allclose(acting[1, 1], [1 + 100, 2 + 25, 3 + 4, 4 + 1], rtol=1e-6)
    np.testing.assert_allclose(bootstrap[1, 1], [0.51, 0.5025, 0.5004, 0.5001], rtol=1e-6)
    np.testing.assert_allclose(acting[1, [0, 2, 3, 4, 5]], 100.0)  # N = 0 there: the full bonus on Q = 0
    # M other than 2, per run
    other = optimistic_values(q, q_target, n, np.array([10.0, 10.0]), np.array([0.0, 0.0]), np.array([0.5, 0.5]))
    np.testing.assert_allclose(np.asarray(other["acting"])[0, 1],
                               [11, 2 + 10 / np.sqrt(2), 3 + 10 / np.sqrt(5), 4 + 10 / np.sqrt(10)], rtol=1e-6)


def test_an_environment_whose_states_cannot_be_listed_is_refused_by_name():
    class Pooled:
        """An environment whose stepping has no cell table."""

    trainer = types.SimpleNamespace(stepping=types.SimpleNamespace(has_cell_table=False, env=Pooled()))
    with pytest.raises(TypeError, match="Pooled's states cannot be listed"):
        cell_values(trainer, None)
