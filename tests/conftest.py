"""Test-session settings: a compilation cache and XLA flags shared by the tests and their subprocesses, and the
order in which xdist's workers take the modules.

Many tests compile the same small programs, and several start Python processes that compile them again
(resume after a kill, sharding, several hosts, fault injection). JAX's persistent cache lets every later
compilation of a program load the first one's executable; it is keyed by the program itself, so a
changed program is compiled afresh. The folder is ignored by git.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".jax_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

# Most of the tests' programs are small and compile longer than they run, so the suite takes the XLA settings that
# make it fastest from cold on the 2-core CPU, measured with an empty compilation cache (jax 0.10.2): XLA's older
# CPU fusion emitters (instead of its MLIR ones) compile a program in about half the time; LLVM's -O1 compiles as
# fast as -O0 here and runs far faster. -O0 made the Atari tests' convolutional programs run twice as long (a
# checkpoint test: 21 s warm at -O0, 9.4 s at -O1 and 9.3 s at -O2) and was no faster on the chain's (test_trainer
# plus a resume-after-kill test, cold: 64 s at -O0, 53 s at -O1 and at -O2). The results stay deterministic, run
# for run; they are compared with each other or with hand-computed values, never with numbers compiled under other
# flags. tests/test_api.py runs the README's example without them, as a user does.
# Set here, before any worker starts: the workers and every process the tests start inherit them.
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=1", "--xla_cpu_use_fusion_emitters=false")


def xla_knows(flag: str) -> bool:
    """Whether this jaxlib's XLA takes ``flag``: an unknown flag in XLA_FLAGS aborts any process that starts JAX."""
    probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], capture_output=True, timeout=300,
                           env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flag})
    return probe.returncode == 0


def xla_flags_without(flags: tuple[str, ...]) -> str:
    """The session's XLA_FLAGS less ``flags`` (whatever their values): for a process that must compile as a
    user's does."""
    names = {f.split("=")[0] for f in flags}
    return " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if f.split("=")[0] not in names)


def xla_flags_with_host_devices(count: int) -> str:
    """The session's XLA_FLAGS and ``count`` CPU devices: for a process that shards over devices and compiles as
    the tests' own processes do."""
    return f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}".strip()


if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    chosen = [TEST_XLA_FLAGS[0], *(f for f in TEST_XLA_FLAGS[1:] if xla_knows(f))]
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *chosen]).strip()


# The slowest modules first. `--dist loadfile` runs each module wholly on one worker, and xdist hands the modules
# out in order as workers free up; by default it orders them by their number of tests, which left modules of one
# or two slow tests (test_montezuma_resume.py, test_multi_gpu_scaling.py) for the end, run by one worker while
# the other idled. Longest first, the last modules are short ones and both workers finish close together.
# Ordered by their seconds in a cold run on the 2-core CPU machine (at 08020a1); modules not named run after these.
SLOWEST_FIRST = (
    "test_faults.py", "test_minigrid.py", "test_craftax.py", "test_frame_checkpoints.py", "test_runner.py",
    "test_api.py", "test_bad_inputs.py", "test_minatar.py", "test_learned_counts.py", "test_montezuma_bench.py",
    "test_pool_path.py", "test_schedules.py", "test_baselines.py", "test_program_processes.py", "test_atari.py",
    "test_maze_torso.py", "test_montezuma_resume.py", "test_diagnostics.py", "test_montezuma.py",
    "test_algorithm_properties.py", "test_program.py", "test_mlp_backward.py", "test_device_pools.py",
    "test_program_identity.py", "test_extension.py", "test_properties.py", "test_atari_games.py",
    "test_contract_extension.py", "test_montezuma_defaults.py", "test_trainer.py",
)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's reordering by number of tests
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOWEST_FIRST)))  # stable: a module's order is kept


@pytest.fixture
def drawn(monkeypatch):
    """The figures the code under test closes, kept open for inspection (it closes each after saving); closed at
    the test's end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    yield figures
    for fig in figures:
        close(fig)
