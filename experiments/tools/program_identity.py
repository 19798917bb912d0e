"""Does a change leave the compiled programs as they were? Lowers every program of two revisions and compares.

    python -m experiments.tools.program_identity --against acf5d2b

checks out ``--against`` into a temporary git worktree and, there and in this working tree (each in its
own Python process, on the CPU), lowers ``train_chunk`` of every program of the chain and the maze figures
(the methods that differ only in numbers, DORA, DQN + RND, BSP; with ``--envs ... montezuma`` also
Montezuma's, each around a small pool of its emulators, which needs EnvPool; the text names the emulators
by their addresses, which are replaced before hashing) in float32 and bfloat16 to StableHLO
without source locations, and hashes the text. Equal hashes mean the same program: a refactor that keeps
them equal cannot change a single-device result or its speed. (On the CPU ``auto`` picks XLA's form of the
maze's convolutions, so the GPU-only Pallas kernels are not compared.) It prints a table and writes it to
``--out``/``program_identity.md`` (and every row, the revisions and the wall-clock to ``program_identity.json``);
it exits 1 if any program differs.

Both revisions must have ``plan_experiment`` (every revision since the Python API), in ``opiq_jax.host.plan``
(``opiq_jax.running.plan`` before the contracts)
or, before the layers became folders, ``opiq_jax.plan``.

Reaches inside: the compiled trainers (in a script run in each revision), to lower every program and compare
revisions.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

from experiments.tools.source_tree import importable

ROOT = Path(__file__).resolve().parents[2]

# Run inside a revision's tree: one line of JSON, {"hashes": {"env precision program": sha256 of the lowered text},
# "ops": {"env precision program": {opcode: instructions of the compiled program}}} (ops only when asked).
LOWER_PROGRAMS = """
import hashlib, json, re, sys
import jax
import os, opiq_jax
# The tree's own layout, read from its files: an import that fails here would be found in the editable install's
# checkout instead (its finder serves every child of opiq_jax), so trying the new names first proves nothing.
import importlib
HOST = next((name for name in ("host", "running")  # the host's folder, named running/ until the contracts
             if os.path.isdir(os.path.join(os.path.dirname(opiq_jax.__file__), name))), None)
if HOST is not None:  # the layers as folders
    from opiq_jax.common.config import stack_hparams
    start_pool = importlib.import_module(f"opiq_jax.{HOST}.host_loop").start_pool
    plan_experiment = importlib.import_module(f"opiq_jax.{HOST}.plan").plan_experiment
    from opiq_jax.runs.compiled import compiled_trainer, start_shapes, trainer_for
    from opiq_jax.runs.experiment import run_keys_for, split_by_program
    from opiq_jax.registry import environments
    if hasattr(environments, "started_by_host"):  # the path declares it (before: runs.compiled.is_pool)
        def is_pool(static):
            return environments.started_by_host(static.env)
    else:
        from opiq_jax.runs.compiled import is_pool
else:  # the flat layout: the host layer in modules of its own, or all in runner (revisions before it)
    from opiq_jax.config import stack_hparams
    from opiq_jax.plan import plan_experiment
    try:
        from opiq_jax.compiled import compiled_trainer, is_pool, start_shapes, trainer_for
        from opiq_jax.experiment import run_keys_for, split_by_program
        from opiq_jax.runner import start_pool
    except ImportError:
        from opiq_jax.runner import compiled_trainer, is_pool, run_keys_for, split_by_program, start_pool, trainer_for
        from opiq_jax.runner import _start_shapes

        def start_shapes(static, num_envs):
            return _start_shapes(type("Shaped", (), dict(static=static,
                                                         runs=(None,) * (num_envs // static.envs_per_run)))())


def lowerable(program):
    # (init, train_chunk, init's arguments after the hyperparameters): a pool's trainer is built around a
    # small pool of its emulators, as the runner builds it
    if not is_pool(program.static):
        return (*compiled_trainer(program.static)[1:], ())
    num_envs = len(program.runs) * program.static.envs_per_run
    return (*trainer_for(program.static, start_pool(program, 0))[1:], start_shapes(program.static, num_envs))


def opcode_counts(compiled_text):
    # how many instructions of each opcode the compiled (optimised) program holds: '%name = TYPE opcode(...'
    instruction = re.compile(r"\\s*(?:ROOT\\s+)?\\S+\\s*=\\s*.*?\\s([a-z][a-z0-9-]*)\\(")
    found = (instruction.match(line) for line in compiled_text.splitlines())
    counts = {}
    for match in filter(None, found):
        counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return dict(sorted(counts.items()))


envs, precisions, methods = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3].split(",")
storage = dict(weight_storage=sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] != "default" else {}
count_ops = len(sys.argv) > 5 and sys.argv[5] == "ops"
hashes, ops = {}, {}
for env in envs:
    for precision in precisions:
        if env == "montezuma":  # 16 emulators a run, a small replay; DORA works on in-program environments only
            options = dict(steps=1024, log_every=512, buffer_size=8192)
            chosen = [m for m in methods if m != "dqn_dora"]
        else:
            options, chosen = dict(steps=200, log_every=100), methods
        experiment = plan_experiment(env, chosen, 2, options=dict(options, precision=precision, **storage))
        for name, program in split_by_program(experiment).items():
            init, train_chunk, start = lowerable(program)
            state = jax.eval_shape(init, *run_keys_for(program), stack_hparams(program.hparams()), *start)
            # a pool's emulators are named by their addresses in this process: the same program in another
            lowered = train_chunk.lower(state)
            text = re.sub(r"EnvPool_[0-9]+_", "EnvPool_", lowered.as_text())
            text = re.sub(r"handle = [0-9]+ : i64", "handle", text)
            hashes[f"{env} {precision} {name}"] = hashlib.sha256(text.encode()).hexdigest()
            if count_ops:
                ops[f"{env} {precision} {name}"] = opcode_counts(lowered.compile().as_text())
print(json.dumps(dict(hashes=hashes, ops=ops)))
"""


@dataclass
class Args:
    against: str = "HEAD"
    """The revision before (a commit, a tag, a branch)."""
    after: str | None = None
    """The revision after (default: this working tree, uncommitted changes included)."""
    envs: tuple[str, ...] = ("chain", "maze")
    """Environments whose programs are lowered."""
    precisions: tuple[str, ...] = ("float32", "bfloat16")
    """Precisions whose programs are lowered."""
    weight_storage: str = "default"
    """``packed`` lowers the programs with bfloat16 weights packed into float32 (give ``--precisions bfloat16``);
    ``default``: the configuration's own."""
    methods: tuple[str, ...] = ("opiq", "dqn_pc", "dqn_dora", "dqn_rnd", "bsp")
    """Methods whose programs are lowered (the default: one of each structure, with two in the plain program)."""
    out: Path = Path("results/program_identity")
    """Folder for ``program_identity.md``."""
    compiled_ops: bool = False
    """Also compile every program and count its instructions by opcode: two programs whose lowered text differs only
    in the order of the state's leaves (arguments, results, loop carries) compile to the same counts, a check that
    the computation is the same where the text cannot be."""
    platform: str = "cpu"
    """Where the programs are lowered (``gpu``: the GPU-only kernels, the maze's Pallas convolutions and the lean
    backward pass, are then what ``auto`` picks and are compared too)."""
    same_path: Path | None = None
    """Lower both revisions from this one folder, each copied there in turn (its ``opiq_jax/`` and ``envs/``): a GPU
    kernel's compiled payload names its source files by their absolute paths, so the same program from two folders
    hashes differently (on a GPU, give this)."""
    before_tree: Path | None = None
    """A folder holding the files of ``--against`` (its ``opiq_jax/`` and ``envs/``), used instead of a git worktree
    on a machine without the repository's history."""


def program_hashes(tree: Path, args: Args) -> dict[str, dict]:
    """``{"hashes": ..., "ops": ...}``: the hash of every program's lowered text in the revision checked out at
    ``tree`` (a process of its own), and with ``--compiled-ops`` its compiled instructions by opcode."""
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)  # the tree's modules first
    env = {**os.environ, "JAX_PLATFORMS": args.platform, "PYTHONPATH": path}
    argv = [",".join(args.envs), ",".join(args.precisions), ",".join(args.methods), args.weight_storage,
            "ops" if args.compiled_ops else "text"]
    result = subprocess.run([sys.executable, "-c", LOWER_PROGRAMS, *argv], cwd=tree, env=env, capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise SystemExit(f"program_identity: error: lowering in {tree} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def device_name(args: Args) -> str:
    """The first device of ``args.platform``, as JAX names it (a process of its own)."""
    found = subprocess.run([sys.executable, "-c", "import jax; print(jax.devices()[0].device_kind)"],
                           capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": args.platform})
    return found.stdout.strip() or "unknown device"


def hashes_from(tree: Path, args: Args) -> dict[str, dict]:
    """:func:`program_hashes` of the revision in ``tree``, lowered from ``args.same_path`` when given."""
    if args.same_path is None:
        return program_hashes(tree, args)
    staging = args.same_path.resolve()
    shutil.rmtree(staging, ignore_errors=True)
    for part in ("opiq_jax", "envs"):
        shutil.copytree(tree / part, staging / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return program_hashes(importable(staging), args)


def compare(old: dict[str, str], new: dict[str, str], old_ops: dict | None = None,
            new_ops: dict | None = None) -> list[dict]:
    """One row per program of either revision: whether both have it and lower it to the same text; with both
    revisions' opcode counts, also whether they compile to the same counts (``same_ops``) and how many
    instructions each has."""
    rows = [dict(program=name, before=old.get(name, "absent")[:12], after=new.get(name, "absent")[:12],
                 same=name in old and name in new and old[name] == new[name])
            for name in dict.fromkeys([*old, *new])]
    if old_ops is None or new_ops is None:
        return rows
    for row in rows:
        before, after = old_ops.get(row["program"]), new_ops.get(row["program"])
        row.update(same_ops=before is not None and before == after,
                   instructions=[None if c is None else sum(c.values()) for c in (before, after)])
    return rows


def row_text(row: dict) -> str:
    """A table row: the lowered texts' hashes, whether they are the same, and the compiled counts where taken."""
    text = f"| {row['program']} | {row['before']} | {row['after']} | {'yes' if row['same'] else '**no**'} |"
    if "same_ops" not in row:
        return text
    counts = " → ".join("absent" if n is None else f"{n:,}" for n in row["instructions"])
    return f"{text} {'yes' if row['same_ops'] else '**no**'} ({counts}) |"


def worktree_at(revision: str, folder: Path) -> Path:
    tree = folder / "tree"
    added = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
                           capture_output=True, text=True)
    if added.returncode != 0:
        raise SystemExit(f"program_identity: error: cannot check out {revision!r}: {added.stderr.strip()[-300:]}")
    return importable(tree)


def hashes_at(revision: str | None, args: Args) -> dict[str, dict]:
    """The programs' hashes of ``revision`` (a temporary worktree), or of this working tree for None."""
    if revision is None:
        return hashes_from(ROOT, args)
    with tempfile.TemporaryDirectory() as folder:
        tree = worktree_at(revision, Path(folder))
        try:
            return hashes_from(tree, args)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv)
    started = time.monotonic()
    old = hashes_from(args.before_tree.resolve(), args) if args.before_tree else hashes_at(args.against, args)
    new = hashes_at(args.after, args)
    ops = (old["ops"], new["ops"]) if args.compiled_ops else ()
    rows = compare(old["hashes"], new["hashes"], *ops)
    after = args.after or "this working tree"
    storage = "" if args.weight_storage == "default" else f", weight storage {args.weight_storage}"
    where = "CPU" if args.platform == "cpu" else f"{args.platform.upper()} ({device_name(args)})"
    lines = [f"Lowered programs of {args.against} (before) and {after} (after), {where}{storage}.", "",
             "| program | before | after | same |" + (" compiled: same opcode counts (instructions) |" if ops else ""),
             "|---|---|---|---|" + ("---|" if ops else "")]
    lines += [row_text(r) for r in rows]
    differ = sum(not r["same"] for r in rows)
    lines += ["", f"{len(rows) - differ} of {len(rows)} programs the same."]
    if ops:
        lines[-1] += (f" {sum(r['same_ops'] for r in rows)} of {len(rows)} compile to the same instructions, "
                      "counted by opcode.")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "program_identity.md").write_text("\n".join(lines) + "\n")
    record = dict(against=args.against, after=after, platform=args.platform, device=where, envs=list(args.envs),
                  precisions=list(args.precisions), weight_storage=args.weight_storage, methods=list(args.methods),
                  compiled_ops=args.compiled_ops, seconds=round(time.monotonic() - started, 1), rows=rows)
    (args.out / "program_identity.json").write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(lines))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
