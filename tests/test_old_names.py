"""The flat layout's import paths keep working, each with a DeprecationWarning, and CHANGELOG.md lists every move."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from opiq_jax.common.old_names import MOVED

ROOT = Path(__file__).resolve().parents[1]

# In a process of its own: importing opiq_jax.methods by its old name binds the module to the package's attribute
# `methods`, which is also the API's function, for the rest of the process.
CHECK = """
import importlib, json, sys, warnings
from opiq_jax.common.old_names import MOVED
found = {}
for old, new in MOVED.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        __import__("opiq_jax." + old)  # as an import statement does: the warning names this line's file
    module = sys.modules["opiq_jax." + old]
    found[old] = dict(same=module is importlib.import_module("opiq_jax." + new), spec=module.__spec__.name,
                      warnings=[(w.category.__name__, str(w.message), w.filename) for w in caught])
print(json.dumps(found))
"""


def test_every_old_module_path_imports_the_moved_module_itself_and_warns_once():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found) == len(MOVED) > 30
    for old, seen in found.items():
        new = f"opiq_jax.{MOVED[old]}"
        assert seen["same"] and seen["spec"] == new, (old, seen)
        assert seen["warnings"] == [["DeprecationWarning", f"opiq_jax.{old} is now {new}; the old name will go in "
                                     "a later release (CHANGELOG.md)", "<string>"]], (old, seen["warnings"])


def test_a_new_module_path_imports_without_a_warning_and_an_unknown_old_name_still_fails():
    code = ("import warnings; warnings.simplefilter('error')\n"
            "import opiq_jax.agent.trainer, opiq_jax.running.plan\n"
            "try:\n    import opiq_jax.no_such_module\nexcept ModuleNotFoundError as e:\n    print(e.name)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["opiq_jax.no_such_module"]


def test_the_changelog_lists_every_move():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    missing = [old for old, new in MOVED.items() if f"| `opiq_jax.{old}` | `opiq_jax.{new}` |" not in changelog]
    assert missing == []
