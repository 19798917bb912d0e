"""Edges a user reaches with odd input or at an odd moment: each gives one line (exit 2 on the command line, results
untouched) or the right behaviour, never a traceback, a silent wrong result or lost data.

The cases: a hand-edited ``--config``, plugins that shadow a built-in or exit, sweep presets with a misspelt metric,
booleans or a huge seed count, ranking on a metric where lower is better, options that do nothing on an
environment, runs whose episodes never ended, the Python API's number types, environment variables (JAX's backend,
matplotlib's, the terminal's encoding), Ctrl-C while the figures are drawn, figures written atomically (SIGKILL
mid-write, a write that fails), a resume that fails after planning, and a preset tried small.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import opiq_jax
from opiq_jax.cli import main
from opiq_jax.common.errors import UsageError
from opiq_jax.parts import PARTS
from opiq_jax.registry.methods import METHODS
from opiq_jax.reporting.plotting import markdown_table, save_atomically, summary_table
from opiq_jax.host.plan import describe, plan_experiment
from opiq_jax.host.sweeping import load_preset, rank_settings, require_same_preset

SMALL = ["--chain-length", "6", "--hidden", "16", "--buffer-size", "600", "--steps", "600", "--log-every", "300",
         "--seeds", "1", "--no-progress", "--no-plot"]
ROOT = Path(__file__).resolve().parents[1]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line_error(capsys, argv: list[str], code: int = 2) -> str:
    """Runs the command line in this process; the single line it printed to stderr."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished small chain run (its folder is copied before any test changes it)."""
    out = tmp_path_factory.mktemp("edges") / "trained"
    main(["train", *SMALL, "--out", str(out)])
    return out


def copied(trained: Path, tmp_path: Path, name: str = "copy") -> Path:
    target = tmp_path / name
    shutil.copytree(trained, target)
    return target


# ------------------------------------------------------------------------------------ --config, hand-edited

CONFIG_EDITS = {
    "zero steps": (lambda d: d["static"].update(total_steps=0), "static.total_steps must be >= 1, got 0"),
    "buffer below batch": (lambda d: d["static"].update(buffer_size=8), "buffer_size (8) must exceed batch_size"),
    "hidden width 0": (lambda d: d["static"].update(hidden=[0]), "hidden widths must be >= 1"),
    "chain of 1": (lambda d: d["static"].update(chain_length=1), "static.chain_length must be >= 2, got 1"),
    "negative lr": (lambda d: d["runs"][0]["hparams"].update(lr=-1.0), "hparams.lr must be > 0, got -1"),
    "NaN lr": (lambda d: d["runs"][0]["hparams"].update(lr=float("nan")), "hparams.lr must be a finite number"),
    "negative m": (lambda d: d["runs"][0]["hparams"].update(m=-2.0), "hparams.m must be >= 0, got -2"),
    "a list at the top": (lambda d: [d], "its top level is a JSON list, not an object"),
    "no static": (lambda d: d.pop("static") and None, 'it has no "static" object'),
    "steps as a string": (lambda d: d["static"].update(total_steps="600"), "static.total_steps must be a number"),
    "unknown hyperparameter": (lambda d: d["runs"][0]["hparams"].update(mm=1.0), "unknown hyperparameter 'mm'"),
}


@pytest.mark.parametrize("case", list(CONFIG_EDITS))
def test_a_hand_edited_config_goes_through_the_command_lines_checks(trained, tmp_path, capsys, case):
    edit, message = CONFIG_EDITS[case]
    data = json.loads((trained / "config.json").read_text())
    replaced = edit(data)  # edits in place, or returns what replaces the whole file
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data if replaced is None else replaced))
    line = one_line_error(capsys, ["train", "--config", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    assert message in line and str(path) in line
    assert not (tmp_path / "out").exists()


def test_a_finished_folders_config_edited_afterwards_is_refused_and_left_as_it_is(trained, tmp_path, capsys):
    """m 0.5 -> 2 in a finished folder's config.json, then --config into the same folder: its metrics are m 0.5's."""
    folder = copied(trained, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["runs"][0]["hparams"]["m"] = 2.0
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    before = snapshot(folder)
    line = one_line_error(capsys, ["train", "--config", str(folder), "--out", str(folder), "--no-progress"])
    assert "was edited after its runs trained" in line
    assert snapshot(folder) == before
    # the edited file is a new experiment elsewhere
    assert opiq_jax.rerun(folder / "config.json", out=tmp_path / "elsewhere", progress=False).folder.exists()


def test_a_resume_that_fails_after_planning_leaves_config_json_as_it_was(trained, tmp_path, capsys):
    folder = copied(trained, tmp_path)
    (folder / "metrics.csv").unlink()
    (folder / "metrics.csv").mkdir()  # a resume that plans, then cannot read its metrics
    config = (folder / "config.json").read_bytes()
    with pytest.raises(SystemExit) as exit_:
        main(["train", *SMALL, "--out", str(folder)])
    assert exit_.value.code in (1, 2)
    assert (folder / "config.json").read_bytes() == config and b'"resolved"' in config
    assert "Traceback" not in capsys.readouterr().err


def test_rerunning_a_finished_folder_says_so_without_compiling(trained, tmp_path, capsys):
    folder = copied(trained, tmp_path)
    main(["train", *SMALL, "--out", str(folder)])
    out = capsys.readouterr().out
    assert "finished already" in out and "compiling" not in out


# ------------------------------------------------------------------------------------ plugins


def write_module(tmp_path: Path, monkeypatch, name: str, text: str) -> None:
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))


SHADOW = '''
import opiq_jax
from opiq_jax.common.config import Option

class Shadow(opiq_jax.Part):
    name = "shadow"
    hparams = (Option("m", 1.0, "my own m", minimum=0.0),)

opiq_jax.register_method(opiq_jax.Method("dqn_shadow", (Shadow(),), "shadows m", settings={}))
'''


def test_a_plugin_part_that_shadows_a_built_in_hyperparameter_is_refused_and_leaves_nothing(tmp_path, monkeypatch,
                                                                                             capsys):
    write_module(tmp_path, monkeypatch, "shadow_m_plugin", SHADOW)
    for argv in (["train", "--plugin", "shadow_m_plugin", "--help"], ["train", "--plugin", "shadow_m_plugin", *SMALL]):
        line = one_line_error(capsys, argv)
        assert "declares hyperparameter 'm', which part 'optimism' declares differently" in line
        sys.modules.pop("shadow_m_plugin", None)
    assert "shadow" not in PARTS and "dqn_shadow" not in METHODS
    core = "class Eps(opiq_jax.Part):\n    name = 'eps'\n    hparams = (Option('lr', 1.0, 'x', minimum=0.0),)\n"
    with pytest.raises(ValueError, match="declares hyperparameter 'lr', which is the trainer's own"):
        exec(SHADOW.split("class")[0] + core + "opiq_jax.register_part(Eps())", {})
    assert "eps" not in PARTS
    plan_experiment("chain", ["opiq"], 1, options=dict(steps=600, log_every=300))  # the registry still works


def test_a_plugin_that_exits_is_an_error_not_a_silent_success(tmp_path, monkeypatch, capsys):
    write_module(tmp_path, monkeypatch, "exits_plugin", "import sys\nsys.exit(0)\n")
    line = one_line_error(capsys, ["train", "--plugin", "exits_plugin", *SMALL])
    assert "--plugin exits_plugin: importing it called sys.exit(0)" in line


# ------------------------------------------------------------------------------------ presets and sweeps

PRESET = {"env": "chain", "seeds": 1, "static": {"total_steps": 600, "log_every": 300}, "grids": [{"method": "opiq"}]}


@pytest.mark.parametrize("change, message", [
    ({"metric": "test_retrun"}, "metric 'test_retrun' is not one that these runs record"),
    ({"metric": "rooms_visited"}, "metric 'rooms_visited' is not one that these runs record"),
    ({"grids": [{"method": "opiq", "grid": {"m": [True, 2]}}]}, "grids[opiq] m must be a number, got True"),
    ({"seeds": 100_000_000}, "is 100,000,000 runs, more than a sweep plans (1,000,000)"),
])
def test_a_preset_is_checked_before_anything_trains(tmp_path, capsys, monkeypatch, change, message):
    from opiq_jax.host import sweeping

    def trains(*args, **kwargs):
        raise AssertionError("the sweep trained before its preset was checked")

    monkeypatch.setattr(sweeping, "run_experiment", trains)  # not after the whole sweep (or 8 minutes)
    path = tmp_path / "preset.json"
    path.write_text(json.dumps({**PRESET, **change}))
    line = one_line_error(capsys, ["sweep", str(path), "--out", str(tmp_path / "out")])
    assert message in line
    assert not (tmp_path / "out").exists()
    if "test_retrun" in message:
        assert "did you mean test_return" in line


def test_a_preset_resumes_its_folder_after_its_metric_is_corrected(tmp_path):
    from opiq_jax.host.sweeping import Preset

    (tmp_path / "preset.json").write_text(json.dumps(dict(Preset(**{**PRESET, "grids": tuple(PRESET["grids"]),
                                                                    "metric": "test_retrun"}).__dict__)))
    require_same_preset(tmp_path, load_preset(PRESET))  # the metric ranks; it trains nothing
    with pytest.raises(UsageError, match="holds a sweep of another preset"):
        require_same_preset(tmp_path, load_preset({**PRESET, "seeds": 2}))


def test_a_sweep_ranked_on_a_loss_puts_the_smallest_first(monkeypatch, tmp_path):
    def rows(setting, value):
        return [dict(run=0, method="opiq", setting=setting, seed=0, step=s, metric="loss", value=value)
                for s in (100, 200)]

    import opiq_jax.host.sweeping as sweeping

    monkeypatch.setattr(sweeping, "sweep_rows", lambda out: rows("m=1", 1.0) + rows("m=2", 0.1))
    ranking = rank_settings(Path("."), "loss")
    assert [t["setting"] for t in ranking] == ["m=2", "m=1"]  # ranked best first
    assert [t["setting"] for t in sweeping.best_per_method(ranking, lower_is_better=True)] == ["m=2"]
    sweeping.write_tables(tmp_path, ranking, "loss")  # best.md, as the sweep writes it, names the smallest loss best
    assert "| opiq | m=2 |" in (tmp_path / "best.md").read_text()
    monkeypatch.setattr(sweeping, "sweep_rows", lambda out: [
        {**r, "metric": "test_return"} for r in rows("m=1", 1.0) + rows("m=2", 0.1)])
    assert [t["setting"] for t in sweeping.best_per_method(rank_settings(Path("."), "test_return"))] == ["m=1"]


def test_a_shipped_preset_can_be_tried_small_and_the_sweep_names_its_plot_command(tmp_path, capsys):
    small = load_preset("chain_opiq", seeds=2, steps=2000)
    assert small.seeds == 2 and small.static["total_steps"] == 2000
    path = tmp_path / "one.json"
    path.write_text(json.dumps({**PRESET, "seeds": 3, "static": {"total_steps": 6000, "log_every": 3000}}))
    main(["sweep", str(path), "--seeds", "1", "--steps", "600", "--out", str(tmp_path / "sw"), "--no-progress"])
    out = capsys.readouterr().out
    assert f"opiq-jax plot {tmp_path / 'sw'} --pooled" in out
    assert "1 runs (1 settings" not in out
    main(["plot", str(tmp_path / "sw"), "--pooled"])
    assert (tmp_path / "sw" / "plot_test_return.png").exists()


# ------------------------------------------------------------------------------------ options and numbers


def test_options_that_would_do_nothing_or_overflow_are_refused(capsys):
    line = one_line_error(capsys, ["train", *SMALL, "--sketch-width", "4294967296"])
    assert "--sketch-width must lie in [2, 1,073,741,824], got 4,294,967,296" in line
    pytest.importorskip("envpool")
    line = one_line_error(capsys, ["train", "--env", "atari:Venture", "--count-features", "exact", "--no-progress"])
    assert "atari:Venture counts the frame feature (the default) or a learned count of the frame (cfn); it has no " \
           "exact cell ids" in line


def test_the_api_refuses_booleans_and_strings_for_numbers_and_takes_numpys_integers():
    for bad in (True, "2"):
        with pytest.raises(UsageError, match=r"m must be a number, got"):
            plan_experiment("chain", ["opiq"], 1, options={"m": bad})
    experiment = plan_experiment("chain", ["opiq"], np.int64(2), options={"steps": np.int64(600),
                                                                        "log_every": np.int64(300)})
    assert len(experiment.runs) == 2 and experiment.static.total_steps == 600
    assert describe(experiment).startswith("2 runs (opiq; 1 setting)")


def test_a_huge_seed_count_fails_at_the_memory_check_before_it_is_listed(monkeypatch):
    from opiq_jax.common.errors import DoesNotFit
    from opiq_jax.host import plan

    seeds = plan.check_seeds(100_000_000)
    assert isinstance(seeds, range) and len(seeds) == 100_000_000  # counted, never built as a list

    def listed(*args):
        raise AssertionError("a run was listed before the memory check")

    monkeypatch.setattr(plan, "RunSpec", listed)
    with pytest.raises(DoesNotFit):
        plan_experiment("chain", ["opiq"], 100_000_000)


# ------------------------------------------------------------------------------------ runs whose episodes never end


def test_a_metric_without_any_value_says_so_in_the_table_and_draws_no_empty_axes(trained, tmp_path, capsys):
    folder = copied(trained, tmp_path)
    lines = (folder / "metrics.csv").read_text().splitlines()
    rewritten = [",".join(line.split(",")[:-1] + ["nan"]) if ",train_return," in line else line for line in lines]
    (folder / "metrics.csv").write_text("\n".join(rewritten) + "\n")
    rows = opiq_jax.load(folder).metrics
    table = summary_table(rows, "train_return")
    assert table[0]["no_value"] and np.isnan(table[0]["auc"]) and np.isnan(table[0]["area_iqm"])
    assert "no value: no episode ended in 600 steps" in markdown_table(table, "train_return")
    main(["plot", str(folder)])
    out = capsys.readouterr().out
    assert "train_return has no value" in out and not (folder / "plot_train_return.png").exists()
    assert (folder / "plot_test_return.png").exists()


# ------------------------------------------------------------------------------------ environment variables


def command(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opiq_jax", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=600)


@pytest.mark.parametrize("platforms", ["bogus", "cuda"])
def test_a_backend_jax_cannot_start_is_one_line(tmp_path, platforms):
    if platforms == "cuda" and any(Path("/dev").glob("nvidia*")):
        pytest.skip("this machine may have CUDA")
    done = command(["train", "--help"], {"JAX_PLATFORMS": platforms}, tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"JAX could not start the backend JAX_PLATFORMS='{platforms}' asks for" in lines[0]


def test_a_bogus_matplotlib_backend_and_an_ascii_terminal_still_train_and_plot(tmp_path):
    out = tmp_path / "résultats, \"ü\" ✓"
    env = {"MPLBACKEND": "bogus", "PYTHONIOENCODING": "ascii", "JAX_PLATFORMS": "cpu"}
    done = command(["train", *SMALL[:-1], "--out", str(out)], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and (out / "plot_test_return.png").exists()
    done = command(["plot", str(out)], env, tmp_path)
    assert done.returncode == 0 and "\\u2713" in done.stdout, done.stderr


# ------------------------------------------------------------------------------------ interrupting the figures


def test_ctrl_c_while_the_figures_are_drawn_says_the_training_is_kept(tmp_path, capsys, monkeypatch):
    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(opiq_jax.api.Results, "plot", interrupted)
    out = tmp_path / "run"
    line = one_line_error(capsys, ["train", *SMALL[:-1], "--out", str(out)], code=130)
    assert "interrupted while drawing the figures; the training is saved in" in line
    assert "nothing to keep" not in line and (out / "metrics.csv").exists()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # fail() ignores a second Ctrl-C; put it back


def png_is_whole(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")


def test_a_figure_whose_write_fails_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    from opiq_jax.reporting.plotting import file_backend

    plt, _ = file_backend()
    fig = plt.figure()
    path = tmp_path / "plot_x.png"
    save_atomically(fig, path, dpi=50)
    before = path.read_bytes()

    def full_disk(self, target, **kwargs):
        target.write(b"\x89PNG partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(fig), "savefig", full_disk)
    with pytest.raises(OSError):
        save_atomically(fig, path, dpi=50)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["plot_x.png"]
    plt.close(fig)


KILLED_WRITER = '''
import os
import sys
from pathlib import Path
from opiq_jax.reporting.plotting import file_backend, save_atomically
from opiq_jax.store import files
path, before = Path(sys.argv[1]), sys.argv[2]
plt, _ = file_backend()
fig = plt.figure(figsize=(4, 3))
plt.plot(range(100))
if before == "a figure before":
    save_atomically(fig, path, dpi=50)

def half_then_wait(f, data):  # the write has begun: half of the new figure is on disk when the kill comes
    f.write(data[: len(data) // 2])
    f.flush()
    os.fsync(f.fileno())
    print("mid-write", flush=True)
    sys.stdin.read()  # until killed

files.write_all = half_then_wait
plt.plot(range(50))
save_atomically(fig, path, dpi=50)
'''


@pytest.mark.parametrize("before", ["no figure before", "a figure before"])
def test_a_figure_killed_mid_write_is_never_truncated(tmp_path, before):
    """SIGKILL while half of a figure's bytes are written (the writer says so, then waits to be killed): the
    figure is the whole previous one, or none, never the half-written one."""
    path = tmp_path / "plot_ü, 'q'.png"
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(path), before], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"})
    said = proc.stdout.readline().strip()
    previous = path.read_bytes() if path.exists() else None
    partial = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the write under way, beside the figure
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert said == b"mid-write", err.decode()[-3000:]
    assert len(partial) == 1 and partial[0].stat().st_size > 0 and not png_is_whole(partial[0])
    if before == "no figure before":
        assert previous is None and not path.exists()
    else:
        assert png_is_whole(path) and path.read_bytes() == previous
