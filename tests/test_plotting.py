"""opiq_jax.reporting.plotting: strict plot errors, experiments of a folder, IQM bands, titles, legends and the
summary's IQM.

Results folders are written by hand (config.json and metrics.csv as the runner writes them) so no test trains.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opiq_jax.common.errors import UsageError
from opiq_jax.reporting import plotting
from opiq_jax.reporting.plotting import (
    curves,
    describe,
    find_experiments,
    markdown_table,
    plot_folder,
    save_curve_figure,
    summary_table,
)
from opiq_jax.reporting.stats import iqm, iqm_curve_ci
from opiq_jax.runs.results_folder import read_metrics
from tests.results_folders import curve_rows, write_folder

PLAIN = ["pseudocounts", "optimism"]


def write_results(folder: Path, values: dict[str, list[list[float]]], *, env: str = "chain", steps: int = 300,
                  parts: list[str] = PLAIN, metrics: tuple[str, ...] = ("train_return",), **static) -> Path:
    """A results folder: ``values[method][seed]`` is that seed's curve, logged every steps / len(curve) steps,
    the same curve for every metric in ``metrics``."""
    length = len(next(iter(values.values()))[0])  # every curve of a folder is logged at the same steps
    rows = curve_rows(values, [steps // length * (i + 1) for i in range(length)], metrics)
    return write_folder(folder, rows, env=env, chain_length=10, total_steps=steps, log_every=steps // 3, parts=parts,
                        **static)


CURVES = {"opiq": [[0, 1, 2], [0, 2, 4], [1, 1, 1], [0, 0, 9]], "dqn": [[0, 0, 0], [0, 0, 1]]}


def test_handwritten_folder_reads_back(tmp_path):
    out = write_results(tmp_path / "x", CURVES)
    rows = read_metrics(out)
    assert len(rows) == 18 and {r["step"] for r in rows} == {100, 200, 300}
    assert curves(rows, "train_return")["opiq"]["values"].shape == (4, 3)


def test_summary_table_iqm_of_seed_areas_by_hand(tmp_path):
    rows = read_metrics(write_results(tmp_path / "x", CURVES))
    table = {t["group"]: t for t in summary_table(rows, "train_return")}
    # opiq's seeds' areas (mean over the logged points): 1, 2, 1, 3; IQM of four values cuts one from each
    # end: sorted 1, 1, 2, 3 -> mean(1, 2) = 1.5
    assert table["opiq"]["area_iqm"] == pytest.approx(1.5)
    assert table["opiq"]["area_iqm_low"] <= 1.5 <= table["opiq"]["area_iqm_high"]
    assert 1.0 <= table["opiq"]["area_iqm_low"] and table["opiq"]["area_iqm_high"] <= 3.0
    # dqn's areas 0 and 1/3: fewer than four seeds, nothing is cut, IQM is the mean 1/6
    assert table["dqn"]["area_iqm"] == pytest.approx(1 / 6)
    # the existing columns are kept: final median of opiq's last points 2, 4, 1, 9 is 3
    assert table["opiq"]["final_median"] == 3.0
    assert summary_table(rows, "train_return")[0]["group"] == "opiq"  # best first by the area under the median
    text = markdown_table(list(table.values()), "train_return")
    assert "IQM of seeds' areas (95% CI)" in text and "| opiq | 4 | 300 | 3 (1.75, 5.25) |" in text


def test_summary_table_ci_is_reproducible_and_reps_can_be_chosen(tmp_path):
    rows = read_metrics(write_results(tmp_path / "x", CURVES))
    assert summary_table(rows, "train_return") == summary_table(rows, "train_return")
    quick = summary_table(rows, "train_return", reps=50, seed=3)
    assert quick[0]["area_iqm"] == pytest.approx(1.5)


def test_markdown_table_accepts_tables_without_iqm():
    old = dict(group="opiq", seeds=2, last_step=100, final_median=1.0, final_q25=0.5, final_q75=2.0, auc=1.0)
    assert markdown_table([old], "train_return").endswith("| 1 | - |")


def test_unknown_metric_lists_the_folders_metrics(tmp_path):
    out = write_results(tmp_path / "x", CURVES, metrics=("train_return", "loss"))
    with pytest.raises(UsageError, match=r"has no metric test_return; its metrics: loss, train_return$"):
        plot_folder(out, ("train_return", "test_return"))
    # the default set draws the default metrics the folder has
    assert [p.name for p in plot_folder(out)] == ["plot_train_return.png"]
    assert [p.name for p in plot_folder(out, None)] == ["plot_train_return.png"]


def test_missing_folder(tmp_path):
    with pytest.raises(UsageError, match=r"nowhere does not exist$"):
        plot_folder(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="holds no results"):
        plot_folder(tmp_path / "empty")


def test_two_experiments_refused_unless_pooled(tmp_path):
    out = tmp_path / "results"
    write_results(out / "short", CURVES, steps=300)
    write_results(out / "long", CURVES, steps=600)
    assert set(find_experiments(out)) == {"short", "long"}
    with pytest.raises(UsageError) as error:
        plot_folder(out, ("train_return",))
    message = str(error.value)
    assert "\n" not in message and "2 experiments" in message and "--pooled" in message
    assert "short (chain of 10 states, 2-4 seeds, 300 steps)" in message and "long (" in message
    (path,) = plot_folder(out, ("train_return",), pooled=True)
    assert path.stat().st_size > 10_000


def test_same_config_in_two_sibling_folders_is_two_experiments(tmp_path):
    # the same command run twice into two folders: pooling would count every seed twice
    write_results(tmp_path / "r" / "a", CURVES)
    write_results(tmp_path / "r" / "b", CURVES)
    with pytest.raises(UsageError, match="2 experiments"):
        plot_folder(tmp_path / "r", ("train_return",))


def test_program_subfolders_with_their_digests_are_one_experiment(tmp_path):
    # each program's config.json holds the digest of what that program trained and what auto resolved to there,
    # as the trainer writes them: those differ (runs, parts; BSP's heads), and one training command's figures must
    # still draw (they once exited with status 2)
    import json

    from opiq_jax.runs.results_folder import CONFIG_FILE, DIGEST_KEY, experiment_digest

    out = tmp_path / "two programs"
    write_results(out / "plain", {"opiq": [[0, 1, 2]]})
    write_results(out / "bsp", {"bsp": [[0, 1, 1]]}, parts=PLAIN + ["bsp"])
    for program in ("plain", "bsp"):
        path = out / program / CONFIG_FILE
        config = json.loads(path.read_text())
        resolved = {"network": "mlp with 10 heads" if program == "bsp" else "mlp"}  # what auto became there
        path.write_text(json.dumps({**config, "resolved": resolved, DIGEST_KEY: experiment_digest(config)}))
    assert find_experiments(out) == {"two programs": [out / "bsp", out / "plain"]}
    assert plot_folder(out, ("train_return",))[0].exists()


def test_program_and_process_subfolders_are_one_experiment(tmp_path):
    out = tmp_path / "multi"
    for i in range(2):
        write_results(out / f"process-{i}" / "plain", {"opiq": [[i, 1, 2]]})
        write_results(out / f"process-{i}" / "bsp", {"bsp": [[0, i, 1]]}, parts=PLAIN + ["bsp"])
    assert find_experiments(out) == {"multi": sorted(out.rglob("process-*/*"))}
    assert plot_folder(out, ("train_return",))[0].exists()
    # a share whose configuration differs (another number of steps) is another experiment
    write_results(out / "process-2" / "plain", {"opiq": [[0, 1, 2, 3]]}, steps=400)
    with pytest.raises(UsageError, match="2 experiments"):
        plot_folder(out, ("train_return",))


def test_iqm_band_figure_and_title(tmp_path, monkeypatch):
    out = write_results(tmp_path / "x", CURVES, steps=300)
    titles = []
    original = plotting.save_curve_figure
    monkeypatch.setattr(plotting, "save_curve_figure", lambda *a, **k: titles.append(a[3]) or original(*a, **k))
    (path,) = plot_folder(out, ("train_return",), statistic="iqm")
    assert path.name == "plot_train_return_iqm.png" and path.stat().st_size > 10_000
    assert titles == ["x\nchain of 10 states, 2-4 seeds, 300 steps, float32\n"
                      "IQM across seeds, 95% stratified-bootstrap CI band"]
    with pytest.raises(UsageError, match="unknown statistic"):
        plot_folder(out, ("train_return",), statistic="mean")


def test_iqm_band_values(tmp_path):
    metric_curves = curves(read_metrics(write_results(tmp_path / "x", CURVES)), "train_return")
    save_curve_figure(tmp_path / "f.png", metric_curves, "train_return", "t", statistic="iqm")
    c = metric_curves["opiq"]
    # last point over seeds: 2, 4, 1, 9 -> sorted 1, 2, 4, 9, IQM mean(2, 4) = 3
    assert c["iqm"][-1] == 3.0 and np.array_equal(c["iqm"], iqm(c["values"], axis=0))
    assert np.all(c["iqm_low"] <= c["iqm"]) and np.all(c["iqm"] <= c["iqm_high"])
    assert (tmp_path / "f.png").stat().st_size > 10_000


@pytest.mark.parametrize("env,static,label", [
    ("chain", dict(chain_length=25), "chain of 25 states"),
    ("maze", {}, "maze 24x24"),
    ("montezuma", {}, "Montezuma's Revenge"),
    ("gymnax:CartPole-v1", {}, "CartPole-v1"),
])
def test_titles_name_environment_size_seeds_and_steps(env, static, label):
    config = dict(static=dict(env=env, total_steps=1_000_000, **static),
                  runs=[dict(method="opiq", setting="paper", seed=s) for s in range(5)])
    assert describe([config]) == f"{label}, 5 seeds, 1,000,000 steps"
    assert describe([config], last_step=40_000) == f"{label}, 5 seeds, 40,000 of 1,000,000 steps"
    # pooled experiments add their seeds; shares of one experiment repeating a seed (a sweep's padding) do not
    assert describe([[config], [config]]).startswith(f"{label}, 10 seeds,")
    assert describe([config, config]).startswith(f"{label}, 5 seeds,")


def test_title_gives_both_ends_when_pooled_methods_stop_at_different_steps():
    config = dict(static=dict(env="montezuma", total_steps=5_000_000),
                  runs=[dict(method=m, setting="paper", seed=0) for m in ("opiq", "opiq_no_ob")])
    rows = [dict(method="opiq", setting="paper", step=5_000_000), dict(method="opiq_no_ob", setting="paper",
                                                                     step=3_000_000)]
    assert "1 seed, 3,000,000-5,000,000 of 5,000,000 steps" in plotting.rows_title("h", [config], rows, "median")
    assert "1 seed, 5,000,000 steps" in plotting.rows_title("h", [config], rows[:1], "median")


def test_iqm_curve_ci_matches_a_loop_over_steps():
    values = np.random.default_rng(0).normal(size=(6, 4))
    values[0, 1] = np.nan  # one seed without a finished episode at step 1
    values[:, 3] = np.nan  # no seed with one at step 3
    point, low, high = iqm_curve_ci(values, reps=200, seed=5)
    index = np.random.default_rng(5).integers(0, 6, size=(200, 6))  # whole seeds resampled, the same for every step
    for step in range(3):
        replicates = [iqm(values[rows, step]) for rows in index]
        assert point[step] == pytest.approx(iqm(values[:, step]))
        assert (low[step], high[step]) == pytest.approx(tuple(np.nanquantile(replicates, [0.025, 0.975])))
    assert np.isnan(point[3]) and np.isnan(low[3]) and np.isnan(high[3])
    with pytest.raises(ValueError, match="seeds, steps"):
        iqm_curve_ci(np.zeros(3))


def test_broken_lines_are_drawn_over_solid_ones():
    """A solid line drawn last would hide the line under it; a broken one leaves it showing in its gaps."""
    orders = [plotting.line_zorder(style) for style in plotting.LINE_STYLES]
    assert plotting.LINE_STYLES[0] == "-" and orders[0] == min(orders) and len(set(orders)) == len(orders)
    assert all(o < 3 for o in orders)  # below the markers and errorbars matplotlib draws at 3


def test_setting_text_and_the_steps_rows_reach():
    config = dict(static=dict(env="maze", total_steps=1_000_000, precision="bfloat16"),
                  runs=[dict(method=m, setting="paper", seed=s) for m in ("opiq", "bsp") for s in range(8)])
    assert plotting.setting_text([config]) == "maze 24x24, 8 seeds, 1,000,000 steps, bfloat16"
    rows = [dict(method="opiq", setting="paper", step=s) for s in (10, 1_000_000)]
    rows += [dict(method="bsp", setting="paper", step=s) for s in (10, 720_000)]
    assert plotting.steps_reached(rows) == (720_000, 1_000_000)
    assert plotting.setting_text([config], 1_000_000, 720_000) == (
        "maze 24x24, 8 seeds, 720,000-1,000,000 of 1,000,000 steps, bfloat16")
    # every curve figure's title holds that line
    assert plotting.setting_text([config]) in plotting.figure_title("h", [config]).splitlines()


ALL_METHODS = ("opiq", "opiq_no_ob", "opiq_no_pc", "dqn", "dqn_pc", "dqn_rsubtract", "dqn_rsubtract_pc", "dqn_bias",
               "dqn_bias_pc", "dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp")


def test_a_figure_reads_like_the_papers(tmp_path, drawn):
    """Legend: the paper's names; lines: every two methods differ in (colour, style); title: environment, seeds,
    steps, precision and statistic, read from the folder."""
    curves_of = {m: [[0, 0, 0], [0, 0, 1], [0, 1, 1]] for m in ALL_METHODS}  # alike on purpose: overlapping lines
    out = write_results(tmp_path / "maze-run", curves_of, env="maze", steps=3000, precision="bfloat16")
    plot_folder(out, ("train_return",))
    (ax,) = drawn[0].axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [  # OPIQ first, then its ablations, then the rest
        "OPIQ", "OPIQ w/o OB", "OPIQ w/o PC", "ε-greedy DQN", "DQN + PC", "DQN R-Subtract", "DQN R-Subtract + PC",
        "DQN Bias", "DQN Bias + PC", "DQN + DORA", "DQN + DORA OA", "DQN + RND", "BSP"]
    styles = [(str(line.get_color()), line.get_linestyle()) for line in ax.get_lines()]
    assert len(styles) == 13 and len(set(styles)) == 13
    assert len({s for _, s in styles}) == 4  # solid, dashed, dotted and dash-dot all in use
    title = ax.get_title()
    for part in ("maze-run", "maze 24x24", "3 seeds", "3,000 steps", "bfloat16", "median", "25-75%"):
        assert part in title, (part, title)


def test_neighbouring_groups_differ_in_colour_and_style_and_no_colour_is_pale():
    import matplotlib.colors

    styles = plotting.group_styles(44)
    assert len(set(styles)) == 44
    for (c1, s1), (c2, s2) in zip(styles, styles[1:]):
        assert c1 != c2 and s1 != s2
    for colour, _ in styles:  # relative luminance: tab20's light halves are above 0.75, the default ten below 0.7
        r, g, b = matplotlib.colors.to_rgb(colour)
        assert 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.72, colour


def test_legend_labels_keep_settings_and_unknown_names(monkeypatch):
    from types import SimpleNamespace

    assert plotting.legend_label("dqn_bias_pc") == "DQN Bias + PC"
    assert plotting.legend_label("opiq_no_ob [m=2,c_action=10]") == "OPIQ w/o OB [m=2,c_action=10]"
    assert plotting.legend_label("my_method") == "my_method"  # a method of the user's own keeps its name
    # a name the registry declares wins over the table (the registry is the one place a method is described)
    monkeypatch.setitem(plotting.METHODS, "opiq", SimpleNamespace(paper_name="OPIQ (registry)"))
    assert plotting.paper_name("opiq") == "OPIQ (registry)"


def test_iqm_title_and_precision_of_packed_and_pooled_configs():
    run = [dict(method="opiq", setting="paper", seed=0)]
    f32 = dict(static=dict(env="chain", chain_length=5, total_steps=100), runs=run)  # an old config: no precision
    packed = dict(static=dict(env="chain", chain_length=5, total_steps=100, precision="bfloat16",
                              weight_storage="packed"), runs=run)
    assert plotting.precision_text([f32]) == "float32"
    assert plotting.precision_text([[f32], [packed]]) == "bfloat16 with packed weights + float32"
    title = plotting.figure_title("h", [packed], statistic="iqm")
    assert title == ("h\nchain of 5 states, 1 seed, 100 steps, bfloat16 with packed weights\n"
                     "IQM across seeds, 95% stratified-bootstrap CI band")
