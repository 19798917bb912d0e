"""How a program is executed is one configuration of its own (``StaticConfig.execution``), apart from what the
agent computes; its options keep their names on the command line, in the API and in ``config.json``."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from opiq_jax.common.config import EXECUTION_FIELDS, STATIC_OPTIONS, Execution, StaticConfig
from opiq_jax.registry.environments import static_for_env

ROOT = Path(__file__).resolve().parents[1]
MODES = {"precision", "weight_storage", "mlp_backward", "maze_torso", "target_values", "overlap"}


def test_the_execution_modes_are_one_configuration_and_the_algorithms_fields_hold_none():
    assert EXECUTION_FIELDS == MODES
    assert not MODES & {f.name for f in dataclasses.fields(StaticConfig)}
    assert MODES <= set(STATIC_OPTIONS)  # still options by their own names


def test_a_mode_is_set_by_its_name_and_saved_flat_as_before():
    static = static_for_env("chain", precision="bfloat16", target_values="network")
    assert static.execution == Execution(precision="bfloat16", target_values="network")
    again = dataclasses.replace(static, overlap=False)
    assert again.execution.overlap is False and again.execution.precision == "bfloat16"
    saved = static.to_dict()
    assert "execution" not in saved and saved["precision"] == "bfloat16" and saved["target_values"] == "network"
    assert StaticConfig(**saved) == static and hash(StaticConfig(**saved)) == hash(static)
    assert static.value("precision") == "bfloat16" and static.value("batch_size") == static.batch_size


def test_the_package_reads_a_mode_through_the_execution():
    """``static.precision`` would be a second way to the same value: every read goes through ``.execution``."""
    found = []
    for path in sorted((ROOT / "opiq_jax").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in MODES
                    and isinstance(node.value, (ast.Name, ast.Attribute))
                    and (node.value.id if isinstance(node.value, ast.Name) else node.value.attr) == "static"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
