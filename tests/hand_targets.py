"""The plain baselines' n-step targets computed by hand, one window at a time, from a run's replay arrays: what
``tests/test_plain_atari.py`` (counts by hashed frame slot) and ``tests/test_bench.py`` (counts by exact cell) check
``td_targets`` against."""

import jax
import numpy as np


def hand_targets(run, ages, beta, c_bootstrap, m, gamma, n, counted: str, next_counted: str) -> np.ndarray:
    """The n-step targets of the windows from ``ages`` with a target network that outputs 0, so the bootstrap is
    the bonus ``c_bootstrap / (N(s_L, a') + 1)^m`` at the window's last next observation. ``counted`` and
    ``next_counted`` name the replay's fields holding each transition's count row and its next observation's.
    The replay must not have wrapped: the oldest transition is at 0."""
    replay = jax.tree.map(np.asarray, run.replay)
    counts = np.asarray(run.counts)
    rows, next_rows = getattr(replay, counted), getattr(replay, next_counted)
    targets = []
    for age in ages:
        total, last = 0.0, None
        for k in range(n):
            if age + k >= replay.size:
                break
            i = age + k
            total += gamma**k * (replay.reward[i] + beta / np.sqrt(counts[rows[i], replay.action[i]]))
            last = i
            if replay.done[i]:
                break
        length = last - age + 1
        bonus = c_bootstrap / (counts[next_rows[last]] + 1.0) ** m
        targets.append(total + gamma**length * (1.0 - replay.terminated[last]) * bonus.max())
    return np.array(targets)
