"""Is the agent's behaviour unchanged? Trains every method on the chain and the maze with two revisions
of opiq-jax and compares their results bit for bit.

    python -m experiments.tools.behaviour_check --against be4242a

checks out ``--against`` into a temporary git worktree, runs the same short ``opiq-jax train`` commands
there and in this working tree (each in its own Python process, on the CPU, in float32), and compares

* every row of ``metrics.csv`` of every program's folder, for the metrics both revisions write (the
  values as the CSV holds them, six significant digits);
* the final parameters of every run's Q-network in the last checkpoint, bit for bit (the strongest
  check: equal parameters after thousands of updates mean equal acting, counting, targets and
  optimiser arithmetic all along), read from either layout of the state (the weight storage's
  subtree ``weights``, or the field ``params`` of the revisions before it).

It prints a table (environment, program, rows compared, rows equal, parameter arrays equal) and writes
it to ``--out``/``behaviour_check.md`` (every row also to ``behaviour_check.json``); it exits 1 if anything
differs. The commands use only
options that every revision since the first CLI understands.

Reaches inside: opiq_jax.store.files, to read the Q-network's parameters out of each revision's checkpoints.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

if not __package__:  # run by path: import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments.tools.source_tree import importable  # noqa: E402

METHODS = ("dqn", "dqn_pc", "dqn_rsubtract", "dqn_rsubtract_pc", "dqn_bias", "dqn_bias_pc", "dqn_dora",
           "dqn_dora_oa", "dqn_rnd", "bsp", "opiq", "opiq_no_ob", "opiq_no_pc")

# Short runs that still learn, count, bootstrap, copy the target and run test episodes many times.
COMMANDS = {
    "chain": ["--env", "chain", "--chain-length", "10", "--steps", "3000", "--log-every", "1000",
              "--buffer-size", "1000", "--hidden", "32", "32"],
    "maze": ["--env", "maze", "--steps", "1200", "--log-every", "400", "--buffer-size", "1000"],
}


@dataclass
class Args:
    """Train every method with two revisions and compare their results bit for bit."""

    against: str = "be4242a"
    """The git revision to compare this working tree with."""
    envs: tuple[str, ...] = ("chain", "maze")
    """Environments to check."""
    seeds: int = 2
    """Seeds per method."""
    out: Path = Path("results/behaviour_check")
    """Where both revisions' results folders and the table go."""
    reuse: bool = False
    """Reuse results folders already in --out (rerun nothing that finished)."""


def train(tree: Path, env: str, seeds: int, out: Path) -> None:
    """``opiq-jax train`` of every method in the source tree ``tree`` (its own modules first on the path)."""
    entry = "opiq_jax" if (tree / "opiq_jax" / "__main__.py").exists() else "opiq_jax.cli"  # older revisions
    command = [sys.executable, "-m", entry, "train", *COMMANDS[env], "--method", *METHODS,
               "--seeds", str(seeds), "--out", str(out), "--no-plot", "--no-progress"]
    environ = {**os.environ, "PYTHONPATH": str(tree), "JAX_PLATFORMS": "cpu"}
    print(f"behaviour_check: {tree.name}: {' '.join(command[2:])}", flush=True)
    subprocess.run(command, cwd=tree, env=environ, check=True, stdout=subprocess.DEVNULL)


def program_folders(out: Path) -> dict[str, Path]:
    """Each program's folder by name (``.`` for a folder that is itself the program)."""
    return {str(p.parent.relative_to(out)): p.parent for p in sorted(out.rglob("config.json"))}


def metric_rows(folder: Path) -> dict[tuple, str]:
    """``(run, method, setting, seed, step, metric) -> value`` as written in the folder's metrics."""
    path = folder / "metrics.csv"
    opener = open if path.exists() else gzip.open
    with opener(path if path.exists() else folder / "metrics.csv.gz", "rt", newline="") as f:
        return {tuple(r[:6]): r[6] for r in list(csv.reader(f))[1:]}


Q_NETWORK_PREFIXES = (".runs.weights.params", ".runs.params")
"""Where a streamed checkpoint keeps the Q-network's float32 parameters, by tree path: in the weight storage's subtree
(``RunState.weights``, revisions since it), or in a field of their own (revisions before it)."""


def q_network_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The Q-network's parameters among a streamed checkpoint's ``arrays`` (tree path -> array), each by its path
    inside the parameters (``['params']['Dense_0']['kernel']``), so that the two layouts compare key by key."""
    found = {}
    for key, value in arrays.items():
        prefix = next((p for p in Q_NETWORK_PREFIXES if key.startswith(p + "[")), None)
        if prefix is not None:  # "[" ends the field's name: .runs.params_low (packed storage's, before) is not it
            found[key[len(prefix):]] = value
    return found


def msgpack_q_network(runs: dict) -> dict:
    """The Q-network's parameters of a msgpack checkpoint's ``runs``, in either layout (:data:`Q_NETWORK_PREFIXES`)."""
    return runs["weights"]["params"] if "weights" in runs else runs["params"]


def checkpoint_params(folder: Path) -> dict[str, np.ndarray]:
    """The Q-network's parameters in the folder's newest checkpoint, by their paths inside the parameters."""
    from flax import serialization

    data = (folder / "checkpoint.msgpack").read_bytes()
    if data.startswith(b"OPIQCKP2"):  # the streamed form (opiq_jax.store.files), arrays by their tree paths
        from opiq_jax.store.files import read_checkpoint_file

        return q_network_arrays(read_checkpoint_file(folder / "checkpoint.msgpack").arrays)
    magic = b"OPIQCKPT"
    if data.startswith(magic):  # the checksummed form: magic, 32-byte SHA-256, payload
        digest, data = data[len(magic): len(magic) + 32], data[len(magic) + 32:]
        assert hashlib.sha256(data).digest() == digest, f"{folder}: checkpoint checksum mismatch"
    params = msgpack_q_network(serialization.msgpack_restore(data)["state"]["runs"])
    flat = {}

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}['{k}']")
        else:
            flat[path] = np.asarray(node)

    walk(params, "")
    return flat


def compare(old: Path, new: Path) -> list[dict]:
    """One row per program folder: metric rows compared and equal, parameter arrays compared and equal."""
    rows = []
    old_folders, new_folders = program_folders(old), program_folders(new)
    assert set(old_folders) == set(new_folders), f"programs differ: {sorted(old_folders)} vs {sorted(new_folders)}"
    for name in old_folders:
        a, b = metric_rows(old_folders[name]), metric_rows(new_folders[name])
        common = sorted(set(a) & set(b))
        equal = sum(a[k] == b[k] for k in common)
        pa, pb = checkpoint_params(old_folders[name]), checkpoint_params(new_folders[name])
        same_params = sum(k in pb and pa[k].shape == pb[k].shape and np.array_equal(pa[k], pb[k]) for k in pa)
        first_diff = next((f"{k}: {a[k]} vs {b[k]}" for k in common if a[k] != b[k]), "")
        rows.append(dict(program=name, rows=len(common), equal=equal, only_old=len(set(a) - set(b)),
                         params=len(pa), params_equal=same_params, first_difference=first_diff))
    return rows


def main(args: Args) -> int:
    here = Path(__file__).resolve().parents[2]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        old_tree = Path(scratch) / f"opiq-jax-{args.against}"
        subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", str(old_tree), args.against],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        importable(old_tree)
        try:
            table = []
            for env in args.envs:
                for tree, label in ((old_tree, "old"), (here, "new")):
                    out = (args.out / f"{env}-{label}").resolve()
                    if not (args.reuse and program_folders(out)):
                        train(tree, env, args.seeds, out)
                table += [dict(env=env, **row) for row in compare(args.out / f"{env}-old", args.out / f"{env}-new")]
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(old_tree)], check=False)
    lines = [f"Behaviour of this working tree against {args.against} (CPU, float32, {args.seeds} seeds per method):",
             "",
             "| env | program | metric rows compared | equal | rows only in the old | parameter arrays | equal "
             "| first difference |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['env']} | {r['program']} | {r['rows']} | {r['equal']} | {r['only_old']} | {r['params']} | "
              f"{r['params_equal']} | {r['first_difference']} |" for r in table]
    report = "\n".join(lines) + "\n"
    print(report)
    (args.out / "behaviour_check.md").write_text(report)
    (args.out / "behaviour_check.json").write_text(json.dumps(dict(against=args.against, seeds=args.seeds,
                                                                   envs=list(args.envs), rows=table), indent=1) + "\n")
    same = all(r["rows"] == r["equal"] and r["only_old"] == 0 and r["params"] == r["params_equal"] for r in table)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
