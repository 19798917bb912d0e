"""``python -m experiments.tools.timeboxed_run``, the lease-bound driver of long runs: it stops the trainer when every
run's last chunk is in or when asked, and records what ran, the chunks it saw and the rate between them."""

from __future__ import annotations

import json

from experiments.tools import timeboxed_run

TINY_CHAIN = ("--env", "chain", "--chain-length", "5", "--method", "dqn", "--seeds", "2", "--hidden", "8",
              "--buffer-size", "200", "--batch-size", "8")
FAST_POLL = ("--budget-seconds", "300", "--poll-seconds", "0.5")  # a finished or stopped trainer is seen at once


def test_a_run_ends_at_its_last_chunk_and_records_what_ran(tmp_path):
    out = tmp_path / "odd, 'quoted' folder é"
    timeboxed_run.main(["--out", str(out), *FAST_POLL, "--", *TINY_CHAIN,
                        "--steps", "2000", "--log-every", "1000"])
    record = json.loads((out / "timeboxed.json").read_text(encoding="utf-8"))
    assert record["stopped"] == "last chunk written" and record["last_step"] == 2000 and record["runs"] == 2
    steps = [step for step, _ in record["chunks"]]
    assert steps[-1] == 2000 and steps == sorted(set(steps)) and all(step % 1000 == 0 for step in steps)
    if len(steps) == 2:  # both chunks seen: every run's steps between them over the seconds between them
        (first, t0), (last, t1) = record["chunks"]
        assert record["env_steps_per_second"] == (last - first) * 2 / (t1 - t0)
    else:  # the first chunk came and went between two polls: one point gives no rate
        assert record["env_steps_per_second"] is None
    assert "--checkpoint-every" in record["command"] and out.name in record["command"]
    assert str(tmp_path) not in json.dumps(record, ensure_ascii=False)  # no absolute path of the machine
    assert "revision" in record and "tree_clean" in record


def test_a_stop_file_ends_the_run_and_refused_options_still_leave_a_record(tmp_path):
    out = tmp_path / "stopped"
    (tmp_path / "stopped.stop").touch()  # DIR.stop beside the folder, as the module's docstring says
    # Far more steps than a fast machine trains before the first poll, which must find the stop file, not the end.
    timeboxed_run.main(["--out", str(out), *FAST_POLL, "--", *TINY_CHAIN, "--steps", "10000000"])
    assert json.loads((out / "timeboxed.json").read_text())["stopped"] == "asked to stop"
    refused = tmp_path / "refused"
    timeboxed_run.main(["--out", str(refused), *FAST_POLL, "--", "--env", "chain", "--steps", "0"])
    assert json.loads((refused / "timeboxed.json").read_text())["stopped"].startswith("trainer exited with")


def test_a_poll_interval_that_is_not_above_0_is_refused_before_the_trainer_starts(tmp_path):
    import pytest

    with pytest.raises(SystemExit, match="--poll-seconds must be above 0, got 0.0"):
        timeboxed_run.main(["--out", str(tmp_path / "x"), "--budget-seconds", "300", "--poll-seconds", "0", "--",
                            *TINY_CHAIN])
    assert not (tmp_path / "x").exists()
