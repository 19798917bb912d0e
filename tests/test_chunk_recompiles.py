"""``experiments/chunk_recompiles.py`` on EnvPool's Montezuma: the chunk compiled ahead compiles in none of its calls,
and the counts are written (to an odd folder name). Run: ``JAX_PLATFORMS=cpu pytest tests/test_chunk_recompiles.py``."""

import json

import pytest

pytest.importorskip("envpool")

from experiments import chunk_recompiles  # noqa: E402


def test_the_chunk_compiled_ahead_never_compiles_in_a_call_and_the_counts_are_written(tmp_path):
    """Whether the jitted chunk compiles again on its second call is JAX's behaviour (it did under jax 0.10 and
    0.11); it is recorded, not asserted. Its first call compiles in any JAX."""
    out = tmp_path / "a, \"quoted\" folder – ü"
    chunk_recompiles.main(["--pool-size", "2", "--steps", "4", "--calls", "3", "--out", str(out)])
    report = json.loads((out / "chunk_recompiles.json").read_text())
    counts = {(r["build"], r["devices"]): r["compiles_per_call"] for r in report["rows"]}
    assert {build for build, _ in counts} == {"jitted", "compiled ahead"}
    assert all(calls == [0, 0, 0] for (build, _), calls in counts.items() if build == "compiled ahead")
    assert all(calls[0] >= 1 for (build, _), calls in counts.items() if build == "jitted")
    jitted_one = ", ".join(map(str, counts[("jitted", 1)]))
    assert f"| jitted | 1 | {jitted_one} |" in (out / "chunk_recompiles.md").read_text()
    assert json.loads((out / "run_info.json").read_text())["seconds"] > 0
