"""BSP's runs with the prior table against the prior network's, over the steps both reached.

Usage (from the project root):
    python docs/results/sweep-maze_baselines-bfloat16-partial/logs/compare_table_network.py

Reads the second session's BSP metrics (the prior network, 200k steps; `second-bsp-network-200k-metrics.csv.gz`)
and the fifth session's (the prior table, 1M steps; `../batch_003/metrics.csv.gz`), and writes
`table-vs-network-200k.md` beside this file: per setting, the median state-action pairs and best episode at 100k and
200k in each run, and how many runs logged identical values in both.
"""
import csv
import gzip
import statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent
NETWORK = HERE / "second-bsp-network-200k-metrics.csv.gz"
TABLE = HERE.parent / "batch_003" / "metrics.csv.gz"
STEPS = ("100000", "200000")
METRICS = ("state_actions_visited", "max_return")


def read(path, last_step):
    """{(run, step, metric): value} up to last_step, and {run: setting}."""
    values, settings = {}, {}
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            if int(row["step"]) <= last_step:
                values[row["run"], row["step"], row["metric"]] = row["value"]
                settings[row["run"]] = row["setting"]
    return values, settings


def medians(values, settings, step, metric):
    by_setting = defaultdict(list)
    for run, setting in settings.items():
        by_setting[setting].append(float(values[run, step, metric]))
    return {s: statistics.median(v) for s, v in by_setting.items()}


def main():
    network, settings = read(NETWORK, 200_000)
    table, table_settings = read(TABLE, 200_000)
    assert settings == table_settings and network.keys() == table.keys(), "the two runs do not match"
    same = [r for r in settings if all(network[k] == table[k] for k in network if k[0] == r)]
    lines = [
        "BSP on the maze, 48 runs (6 settings x 8 seeds), bfloat16: the prior network (second session) against the",
        "prior table (fifth session), written by `logs/compare_table_network.py`.",
        "",
        f"Runs whose every logged value is the same in both, up to 200k steps: {len(same)} of {len(settings)}.",
        "",
        "| setting | step | state-action pairs: network | table | best episode: network | table |",
        "|---|---|---|---|---|---|",
    ]
    for step in STEPS:
        pairs = [medians(v, settings, step, METRICS[0]) for v in (network, table)]
        best = [medians(v, settings, step, METRICS[1]) for v in (network, table)]
        for s in sorted(pairs[0], key=lambda k: float(k.split("=")[1])):
            lines.append(f"| {s} | {int(step):,} | {pairs[0][s]:g} | {pairs[1][s]:g} | {best[0][s]:g} | {best[1][s]:g} |")
    (HERE / "table-vs-network-200k.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
