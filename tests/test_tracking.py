"""opiq_jax.reporting.tracking: per-method aggregates streamed to TensorBoard event files and read back with
TensorBoard's own reader (the ``tracking`` extra writes them, the ``dev`` extra brings the reader)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from opiq_jax.common.errors import UsageError
from opiq_jax.reporting.tracking import aggregates, make_tracker, run_groups
from tests.missing_extras import hide_module

pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

NAN = math.nan


def config(settings: tuple[str, ...] = ("paper",)) -> dict:
    """A config.json dict: opiq with four seeds per setting, then dqn with two."""
    runs = [dict(method="opiq", setting=s, seed=seed, hparams={"m": 2.0}) for s in settings for seed in range(4)]
    runs += [dict(method="dqn", setting="paper", seed=seed, hparams={}) for seed in range(2)]
    for i, run in enumerate(runs):
        run["run"] = i
    return dict(static=dict(env="chain", chain_length=10, total_steps=300, log_every=100), seed=0, runs=runs)


def read(folder) -> event_accumulator.EventAccumulator:
    accumulator = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.TENSORS: 0})
    accumulator.Reload()
    return accumulator


def scalars(accumulator, tag: str) -> dict[int, float]:
    return {e.step: e.value for e in accumulator.Scalars(tag)}


def test_chunks_read_back_as_hand_computed_aggregates(tmp_path):
    tracker = make_tracker("tensorboard", tmp_path, config())
    # runs 0-3 are opiq, 4-5 dqn
    tracker.log_chunk(100, {"train_return": np.array([NAN, NAN, NAN, NAN, 0.0, NAN]),
                            "loss": np.array([1.0, 2.0, 3.0, 10.0, 0.5, 0.5]),
                            "epsilon": np.zeros(6)})  # not a tracked metric
    tracker.log_chunk(200, {"train_return": np.array([4.0, 0.0, 8.0, 2.0, 1.0, 3.0]),
                            "loss": np.array([1.0, 1.0, 1.0, 1.0, 0.0, 2.0])})
    tracker.close()
    opiq, dqn = read(tmp_path / "tensorboard" / "opiq"), read(tmp_path / "tensorboard" / "dqn")
    assert sorted(opiq.Tags()["scalars"]) == sorted(f"{m}/{a}" for m in ("train_return", "loss")
                                                     for a in ("median", "iqm", "q25", "q75"))
    # opiq's all-NaN first chunk is skipped; at 200 its returns sort to 0, 2, 4, 8: median 3, IQM mean(2, 4) = 3,
    # quartiles (linear) 1.5 and 5
    assert scalars(opiq, "train_return/median") == {200: 3.0}
    assert scalars(opiq, "train_return/iqm") == {200: 3.0}
    assert scalars(opiq, "train_return/q25") == {200: 1.5} and scalars(opiq, "train_return/q75") == {200: 5.0}
    # loss at 100: 1, 2, 3, 10 -> median 2.5, IQM mean(2, 3) = 2.5, q75 = 3 + 0.25 * 7 = 4.75 (the outlier trimmed)
    assert scalars(opiq, "loss/median")[100] == 2.5 and scalars(opiq, "loss/iqm")[100] == 2.5
    assert scalars(opiq, "loss/q75")[100] == pytest.approx(4.75)
    # dqn at 100: one finished episode (the NaN run is left out): every aggregate is 0
    assert scalars(dqn, "train_return/median") == {100: 0.0, 200: 2.0}
    assert scalars(dqn, "train_return/iqm") == {100: 0.0, 200: 2.0}


def test_configuration_is_logged_as_text(tmp_path):
    make_tracker("tensorboard", tmp_path, config()).close()
    accumulator = read(tmp_path / "tensorboard" / "opiq")
    (event,) = accumulator.Tensors("config/text_summary")
    text = event.tensor_proto.string_val[0].decode()
    assert '"chain_length": 10' in text and '"seeds": [\n' in text and '"m": 2.0' in text and '"runs": 4' in text


def test_groups_split_by_setting_when_a_method_has_several(tmp_path):
    cfg = config(("paper", "m=8,c_action=1"))
    assert {k: list(v) for k, v in run_groups(cfg["runs"]).items()} == {
        "opiq [paper]": [0, 1, 2, 3], "opiq [m=8,c_action=1]": [4, 5, 6, 7], "dqn [paper]": [8, 9]}
    tracker = make_tracker("tensorboard", tmp_path, cfg)
    tracker.log_chunk(100, {"test_return": np.arange(10.0)})
    tracker.close()
    folders = sorted(p.name for p in (tmp_path / "tensorboard").iterdir())
    assert folders == ["dqn_paper", "opiq_m=8,c_action=1", "opiq_paper"]
    # the second setting's runs 4, 5, 6, 7: IQM mean(5, 6) = 5.5
    assert scalars(read(tmp_path / "tensorboard" / "opiq_m=8,c_action=1"), "test_return/iqm") == {100: 5.5}


def test_none_unknown_wrong_shape_and_missing_package(tmp_path, monkeypatch):
    assert make_tracker("none", tmp_path, config()) is None
    assert not (tmp_path / "tensorboard").exists()
    with pytest.raises(UsageError, match="unknown tracker 'wandb'"):
        make_tracker("wandb", tmp_path, config())
    tracker = make_tracker("tensorboard", tmp_path, config())
    with pytest.raises(ValueError, match="one value per run"):
        tracker.log_chunk(100, {"loss": np.zeros(3)})
    tracker.close()

    hide_module(monkeypatch, "tensorboardX")
    message = r"^--track tensorboard needs the tracking extra: pip install -e '\.\[tracking\]'$"
    with pytest.raises(UsageError, match=message):
        make_tracker("tensorboard", tmp_path, config())


def test_aggregates():
    assert aggregates(np.array([NAN, NAN])) is None
    assert aggregates(np.array([5.0])) == dict(median=5.0, iqm=5.0, q25=5.0, q75=5.0)
    assert aggregates(np.array([1.0, NAN, 2.0, 3.0, 4.0, 100.0]))["iqm"] == 3.0  # n = 5: cut one each end
