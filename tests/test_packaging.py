"""The wheel, as a user installs it: built from the checkout, installed into a fresh virtual environment, its
environments import from ``opiq_jax.envs`` (the top-level ``envs/`` folder, mapped by pyproject.toml's package-dir,
no link and no ``__path__`` trick) and find their data; an empty ``opiq_jax`` folder where Python starts hides nothing.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "opiq_jax", "envs")
ENVIRONMENT_MODULES = sorted(p.stem for p in (ROOT / "envs").glob("*.py") if p.stem != "__init__")


def quiet(command: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> Path:
    """The python of a fresh virtual environment holding the wheel alone; the dependencies (jax, gymnax, ...) are
    this environment's, appended after its own site-packages by a .pth file so that nothing is downloaded."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # a copy: a build in the checkout would leave build/ and *.egg-info beside the tests
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                            if (ROOT / name).is_dir() else {}))
    quiet([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
           "-w", work / "dist", source])
    wheel, = (work / "dist").glob("opiq_jax-*.whl")
    venv.create(work / "venv", with_pip=True)
    python = work / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python"
    quiet([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel])
    own = quiet([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    (Path(own) / "opiq_jax_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def run_in(python: Path, folder: Path, code: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"JAX_PLATFORMS": "cpu"}
    return quiet([python, "-c", code], cwd=folder, env=env).stdout.split()


def test_the_wheel_holds_every_environment_and_its_data(fresh_python, tmp_path):
    code = ("import importlib, sys, sysconfig, opiq_jax.envs.maze as maze\n"
            f"for name in {ENVIRONMENT_MODULES!r}:\n"
            "    module = importlib.import_module('opiq_jax.envs.' + name)\n"
            "    assert module.__file__.startswith(sysconfig.get_paths()['purelib']), module.__file__\n"
            "assert 'envs' not in sys.modules\n"
            "print(maze.load_maze_grid().shape, len(sys.modules['opiq_jax.envs'].__path__))")
    assert run_in(fresh_python, tmp_path, code) == ["(24,", "24)", "1"]


def test_the_wheel_is_laid_out_as_the_package_without_a_link(fresh_python):
    own = Path(run_in(fresh_python, fresh_python.parent, "import opiq_jax; print(opiq_jax.__path__[0])")[0])
    assert (own / "envs" / "base.py").is_file() and not (own / "envs").is_symlink()
    assert not (ROOT / "opiq_jax" / "envs").exists(), "the checkout links opiq_jax/envs again"


def test_an_empty_opiq_jax_folder_where_python_starts_does_not_hide_the_installed_package(fresh_python, tmp_path):
    """A results folder named ``opiq_jax`` in the working directory: Python prefers the installed package to a
    namespace made of the empty folder."""
    (tmp_path / "opiq_jax").mkdir()
    code = "import opiq_jax, opiq_jax.envs; print(opiq_jax.train.__module__, opiq_jax.envs.__name__)"
    assert run_in(fresh_python, tmp_path, code) == ["opiq_jax.api", "opiq_jax.envs"]
