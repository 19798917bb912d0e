"""experiments/bench/multi_gpu_scaling.py on two forced host devices (a subprocess: the device count is fixed at
start-up)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.bench.multi_gpu_scaling import count_collectives
from tests.conftest import xla_flags_with_host_devices

SCRIPT = """
import sys
from experiments.bench.multi_gpu_scaling import main
try:
    main(["--runs", "3", "--out", sys.argv[1]])
except SystemExit as error:
    print("refused:", error)
main(["--env", "chain", "--runs", "2", "--steps", "70", "--repeats", "1", "--precision", "bfloat16",
      "--out", sys.argv[1], "--partitioners", "per-device", "gspmd"])
"""


def test_script_times_one_and_two_devices_and_refuses_runs_that_do_not_divide(tmp_path):
    # the session's XLA flags (tests/conftest.py: the cheapest LLVM level compiles these small programs faster) and 2
    # devices
    flags = xla_flags_with_host_devices(2)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=Path(__file__).parents[1], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused: multi_gpu_scaling: error: --runs [3] do not divide over the 2 local devices" in result.stdout
    saved = json.loads((tmp_path / "scaling.json").read_text())
    assert (saved["devices"], saved["env"], saved["precision"]) == (2, "chain", "bfloat16")
    assert saved["options"]["partitioners"] == ["per-device", "gspmd"] and saved["wall_seconds"] > 0
    rows = saved["rows"]
    assert [(r["runs"], r["partitioner"], r["collectives"]) for r in rows] == [(2, "per-device", 0), (2, "gspmd", 0)]
    for row in rows:  # each rate: 2 runs x 70 steps over the fastest of its timed chunks; the speed-up their ratio
        assert row["one_device_runs"] == 2 and len(row["one_device_seconds"]) == len(row["all_devices_seconds"]) == 1
        assert row["one_device"] == 2 * 70 / min(row["one_device_seconds"])
        assert row["all_devices"] == 2 * 70 / min(row["all_devices_seconds"])
        assert row["speedup"] == pytest.approx(row["all_devices"] / row["one_device"])
    assert ("| 2 |" in (tmp_path / "scaling.md").read_text()
            and "| per-device | 0 |" in (tmp_path / "scaling.md").read_text())


def test_collectives_are_counted_in_hlo_text_and_names_that_only_contain_them_are_not():
    """The parser alone, on hand-written HLO: the chain's programs on two CPU devices hold no collective to count."""
    hlo = "\n".join([
        "  %all-gather.1 = bf16[2,64]{1,0} all-gather(bf16[1,64]{1,0} %p), dimensions={0}",
        "  %ags = (f32[2]{0}) all-gather-start(f32[1]{0} %q)",
        "  %r = f32[] all-reduce(f32[] %x), to_apply=%add",
        "  %fusion.all-gather-like = f32[2]{0} fusion(f32[2]{0} %y), kind=kLoop",
    ])
    assert count_collectives(hlo) == 3
