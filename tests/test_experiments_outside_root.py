"""Experiment scripts run by path from outside the repository root (no PYTHONPATH): they find their
``experiments.*`` imports themselves, as ``python -m experiments.NAME`` from the root would."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.mark.parametrize("script", ["paper/compare_methods.py", "paper/tabular_counterexamples.py"])
def test_help_by_path_from_another_folder(script, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run([sys.executable, str(EXPERIMENTS / script), "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "--help" in done.stdout
    assert not any(tmp_path.iterdir())  # --help writes nothing
