"""``opiq_jax.make_train``: the compiled core's pure functions, public, and the same program ``opiq_jax.train`` runs."""

import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import opiq_jax
from opiq_jax.runs.results_folder import read_metrics

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = dict(steps=600, log_every=300, chain_length=6, hidden=(16,), buffer_size=600)


def readme_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- core-example:[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert match, "README.md has no marked example of make_train"
    return match.group(1)


def test_the_readmes_core_example_runs_verbatim():
    run = subprocess.run([sys.executable, "-c", readme_block()], capture_output=True, text=True, timeout=600,
                         env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-3000:]
    values = [float(v) for v in re.findall(r"[-\d.e]+", run.stdout.strip().strip("[]"))]
    assert len(values) == 8  # one per seed


def test_make_train_is_the_program_train_runs(tmp_path):
    """The chunks of ``make_train``'s functions, called by hand, give every metric ``opiq_jax.train`` wrote for the
    same experiment, to the six digits it writes (the CPU is deterministic)."""
    program = opiq_jax.make_train("chain", ["opiq", "dqn_pc"], seeds=2, c_action=3.0, **OPTIONS)
    assert "make_train" in opiq_jax.__all__ and program.chunks == 2 and len(program.runs) == 4
    state = jax.jit(program.init)(program.run_keys, program.env_keys, program.hparams)
    step = jax.jit(program.train_chunk, donate_argnums=0)
    by_hand = {}
    for chunk in range(program.chunks):
        state, metrics = step(state)
        for name in program.metric_names:
            for run, value in enumerate(np.asarray(metrics[name])):
                by_hand[(run, 300 * (chunk + 1), name)] = float(f"{value:.6g}")  # as metrics.csv writes it
    results = opiq_jax.train("chain", ["opiq", "dqn_pc"], seeds=2, out=tmp_path / "trained", progress=False,
                             verbose=False, c_action=3.0, **OPTIONS)
    written = {(row["run"], row["step"], row["metric"]): row["value"] for row in read_metrics(results.folder)}
    shared = set(written) & set(by_hand)
    assert len(shared) >= 4 * 2 * 5
    assert all(written[k] == by_hand[k] or (np.isnan(written[k]) and np.isnan(by_hand[k])) for k in shared)


@pytest.mark.parametrize("methods, message", [(["opiq", "bsp"], "make 2 programs"),
                                              (["opiq"], "unknown option chain_lenght; did you mean chain_length")])
def test_what_make_train_cannot_build_is_refused_in_one_line(methods, message):
    options = {"chain_lenght": 5} if "unknown" in message else {}
    with pytest.raises(opiq_jax.UsageError, match=message):
        opiq_jax.make_train("chain", methods, seeds=1, **options)


def test_an_environment_started_by_the_host_is_refused_by_make_train_in_one_line():
    """A pool of emulators (its path declares ``started_by_host``) is started on the host: the pure functions cannot
    hold it."""
    with pytest.raises(opiq_jax.UsageError, match="^montezuma steps a pool of emulators from the host"):
        opiq_jax.make_train("montezuma", ["opiq"], seeds=1, steps=2_000, buffer_size=2_000)
