"""``experiments/chunk_recompiles.py`` on EnvPool's Montezuma, one CPU device: the jitted chunk compiles on its first
two calls (so a timer of the second call timed a compile), the chunk compiled ahead on none; the files it writes
land in an odd folder name. Run: ``JAX_PLATFORMS=cpu pytest tests/test_chunk_recompiles.py``."""

import json

import pytest

pytest.importorskip("envpool")

from experiments import chunk_recompiles  # noqa: E402


def test_the_jitted_chunk_compiles_again_on_its_second_call_and_the_compiled_one_never(tmp_path):
    out = tmp_path / "a, \"quoted\" folder – ü"
    chunk_recompiles.main(["--pool-size", "2", "--steps", "4", "--calls", "3", "--out", str(out)])
    report = json.loads((out / "chunk_recompiles.json").read_text())
    counts = {(r["build"], r["devices"]): r["compiles_per_call"] for r in report["rows"]}
    assert counts == {("jitted", 1): [1, 1, 0], ("compiled ahead", 1): [0, 0, 0]}
    assert "| jitted | 1 | 1, 1, 0 |" in (out / "chunk_recompiles.md").read_text()
    assert json.loads((out / "run_info.json").read_text())["seconds"] > 0
