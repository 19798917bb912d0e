"""The lease-bound driver of long runs (experiments/tools/timeboxed_run.py): what it reads from the metrics, and that it
stops the trainer when the last chunk is in or when asked, recording what ran."""

from __future__ import annotations

import json

from experiments.tools import timeboxed_run
from opiq_jax.store.metrics import METRICS_HEADER

TINY_CHAIN = ("--env", "chain", "--chain-length", "5", "--method", "dqn", "--seeds", "1", "--hidden", "8",
              "--buffer-size", "200", "--batch-size", "8")


def write_rows(path, rows, torn=""):
    path.write_text(",".join(METRICS_HEADER) + "\n" + "".join(
        f"{run},dqn,paper,{run},{step},loss,0.5\n" for run, step in rows) + torn, encoding="utf-8")


def test_chunks_written_is_the_step_every_run_has_reached(tmp_path):
    assert timeboxed_run.chunks_written(tmp_path) == 0  # before the trainer wrote anything
    (tmp_path / "config.json").write_text(json.dumps(dict(static=dict(log_every=1000), runs=[{}, {}])))
    write_rows(tmp_path / "metrics.csv", [(0, 1000), (1, 1000), (0, 2000)], torn="1,dqn,paper,1,20")
    assert timeboxed_run.chunks_written(tmp_path) == 1000  # run 1's second chunk is still being appended


def test_rate_counts_every_run_between_the_first_and_last_chunk_seen():
    record = dict(chunks=[[1000, 10.0], [2000, 12.0], [5000, 18.0]])
    assert timeboxed_run.rate(record, runs=4) == (5000 - 1000) * 4 / 8.0
    assert timeboxed_run.rate(dict(chunks=[[1000, 10.0]]), runs=4) is None


def test_a_run_ends_at_its_last_chunk_and_records_what_ran(tmp_path):
    out = tmp_path / "odd, 'quoted' folder é"
    timeboxed_run.main(["--out", str(out), "--budget-seconds", "300", "--", *TINY_CHAIN,
                        "--steps", "2000", "--log-every", "1000"])
    record = json.loads((out / "timeboxed.json").read_text(encoding="utf-8"))
    assert record["stopped"] == "last chunk written" and record["last_step"] == 2000 and record["runs"] == 1
    assert [step for step, _ in record["chunks"]][-1] == 2000
    assert "--checkpoint-every" in record["command"] and str(out) in record["command"]


def test_a_stop_file_ends_the_run_and_refused_options_still_leave_a_record(tmp_path):
    out = tmp_path / "stopped"
    timeboxed_run.stop_file(out).touch()
    # Far more steps than a fast machine trains before the first poll, which must find the stop file, not the end.
    timeboxed_run.main(["--out", str(out), "--budget-seconds", "300", "--", *TINY_CHAIN, "--steps", "10000000"])
    assert json.loads((out / "timeboxed.json").read_text())["stopped"] == "asked to stop"
    refused = tmp_path / "refused"
    timeboxed_run.main(["--out", str(refused), "--budget-seconds", "300", "--", "--env", "chain", "--steps", "0"])
    assert json.loads((refused / "timeboxed.json").read_text())["stopped"].startswith("trainer exited with")
