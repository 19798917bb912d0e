"""Environment steps per second of the OPIQ authors' own PyTorch code, in one process, on the chain, the maze or
Montezuma's Revenge.

The authors' code (the repository of "Optimistic Exploration even with a Pessimistic Initialisation", ICLR 2020)
is not part of this project and is never imported here: this script runs an external checkout of it as a program,
``python3 src/main.py with KEY=VALUE ...`` (their sacred entry point) in a subprocess whose working folder is the
checkout, with OPIQ and the paper's settings for the environment (``PAPER_SETTINGS``) and ``t_max`` set to the
step budget. Test episodes are switched off (``testing_interval`` past the budget), so every timed step is a
training step: act (OPIQ's optimistic action selection on the pseudocounts), step the environment, store, one
minibatch update.

What it measures: the wall-clock time between the lines their code logs at the start of the training loop
("Beginning training.") and after it ("Closing envs"), read as they arrive, so imports, sacred's start-up,
building the environment and the networks are excluded. rate = steps / that time. A second, "steady" rate is taken
between the episode-end lines (``T: 1,090, Episode Reward: ...``) from ``--skip`` steps on, leaving out the first
updates. Torch runs with ``--threads`` CPU threads (OMP_NUM_THREADS, MKL_NUM_THREADS; 1 = one process per core);
their code puts the networks on CUDA when torch sees a GPU.

Writes into ``--out``: ``authors_<env>.json`` and ``authors_<env>.md`` (CPU model, GPU, torch and numpy versions
of the interpreter that ran their code, the command, steps, seconds, rates) and ``authors_<env>.log`` (their
output, each line with its arrival time).

Montezuma: their ``Montezuma-v0`` goes through gym 0.12's Atari environment, which imports atari-py; where atari-py
has no build (Python >= 3.9), an adapter module named ``atari_py`` on ale-py must be on ``PYTHONPATH`` (kept
outside this project with their code, as are the files of theirs that it needs), and their wrappers need OpenCV
and Pillow.

Run: ``python experiments/bench/authors_code_rate.py --code /path/to/opiq-checkout --python /path/to/venv/bin/python
--env chain --steps 5000 --out results/authors-rate`` (``--python``: an interpreter with their dependencies;
the default is this one). Only the standard library is needed here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

# The paper's settings in the authors' flag names (their src/config/default.yaml). The maze's are the README's
# OPIQ maze command, less t_max, the test schedule and save; the chain's are the appendix's, as this project
# records them (opiq_jax.registry.environments "chain" and opiq_jax.registry.methods' best OPIQ setting for the chain;
# the test checks the two agree). lr is the default of both (5e-4), written out.
PAPER_SETTINGS: dict[str, dict[str, str]] = {
    "chain": {
        "env": "100Chain-v0", "agent": "fc", "batch_size": "64", "buffer_size": "10000", "n_step": "1",
        "target_update_interval": "200", "gamma": "0.99", "lr": "0.0005",
        "epsilon_start": "0.01", "epsilon_finish": "0.01",
        "count_rewards": "True", "count_beta": "0.1", "count_size": "32", "recompute_count_rewards": "True",
        "count_state_only_rewards": "False", "double_q": "False", "reward_clipping": "False",
        "action_selector": "optimistic_action", "optim_m": "0.5", "optim_action_tau": "1",
        "optim_bootstrap": "True", "optim_bootstrap_tau": "1", "log_interval": "1000", "name": "opiq",
        "label": "chain",
    },
    "maze": {
        "env": "Maze-v0", "agent": "2conv", "batch_size": "64", "buffer_size": "250000", "n_step": "3",
        "target_update_interval": "1000", "gamma": "0.99", "lr": "0.0005",
        "epsilon_time_length": "50000", "epsilon_finish": "0.01",
        "count_rewards": "True", "count_beta": "0.1", "count_size": "128", "recompute_count_rewards": "True",
        "count_state_only_rewards": "False", "double_q": "False", "reward_clipping": "False",
        "episode_limit": "250", "action_selector": "optimistic_action", "optim_m": "2", "optim_action_tau": "100",
        "optim_bootstrap": "True", "optim_bootstrap_tau": "0.01", "log_interval": "10000", "name": "opiq",
        "label": "maze",
    },
    # their README's OPIQ Montezuma command as they corrected it (count_beta 0.1, commit b7df513: the first
    # command's 0.01 was wrong), less t_max, the test schedule and save (their Montezuma-v0: the NoFrameskip-v4
    # ROM with sticky actions, a skip of 4 with the max of the last two frames, 84 x 84 grey frames)
    "montezuma": {
        "env": "Montezuma-v0", "past_frames_input": "4", "agent": "atari", "batch_size": "32", "update_freq": "4",
        "epsilon_time_length": "1000000", "epsilon_finish": "0.01", "test_epsilon": "0.01",
        "count_rewards": "True", "count_beta": "0.1", "atari_count": "True", "recompute_count_rewards": "True",
        "n_step": "3", "buffer_size": "1000000", "double_q": "False", "count_state_only_rewards": "False",
        "reward_clipping": "True", "target_update_interval": "8000", "gamma": "0.99", "lr": "0.0005",
        "mmc": "True", "mmc_beta": "0.01", "action_selector": "optimistic_action", "optim_m": "2",
        "optim_action_tau": "0.1", "optim_bootstrap": "True", "optim_bootstrap_tau": "0.01",
        "log_interval": "50000", "name": "OPIQ", "label": "montezuma_opiq",
    },
}

BEGIN_MARK = "Beginning training."
END_MARK = "Closing envs"
EPISODE_LINE = re.compile(r"\bT: ([\d,]+), Episode Reward:")

# Run by the interpreter of their code: what it has (None where a package is missing, which their code will report).
PROBE = """import importlib, json, sys
def load(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
torch, numpy = load("torch"), load("numpy")
cuda = bool(torch and torch.cuda.is_available())
print(json.dumps({"torch": torch and torch.__version__, "numpy": numpy and numpy.__version__,
                  "torch_threads": torch and torch.get_num_threads(), "cuda": cuda,
                  "gpu": torch.cuda.get_device_name(0) if cuda else None,
                  "python": ".".join(map(str, sys.version_info[:3]))}))
"""


def build_command(python: str, env: str, steps: int, save: bool = False) -> list[str]:
    """Their entry point with the paper's settings for ``env``, ``steps`` training steps and no test episodes.

    ``save``: sacred's file observer on, as their README's maze command has it (records in the checkout's
    results/sacred). Off, ``save`` is left out: their main.py reads any value given for it as a string, and
    "False" is true."""
    if env not in PAPER_SETTINGS:
        raise ValueError(f"unknown env {env!r}: use one of {sorted(PAPER_SETTINGS)}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    updates = {**PAPER_SETTINGS[env], "t_max": str(steps), "testing_interval": str(steps + 1), "test_episodes": "1"}
    if save:
        updates["save"] = "True"
    return [python, "src/main.py", "with", *(f"{k}={v}" for k, v in updates.items())]


def thread_env(threads: int) -> dict[str, str]:
    """The environment of their process: this one's, with torch's CPU threads pinned and output unbuffered."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "PYTHONUNBUFFERED": "1"}


def progress(stamped: list[tuple[float, str]]) -> list[tuple[int, float]]:
    """``(T, arrival time)`` of every episode-end line of their log."""
    found = []
    for when, line in stamped:
        match = EPISODE_LINE.search(line)
        if match:
            found.append((int(match.group(1).replace(",", "")), when))
    return found


def loop_seconds(stamped: list[tuple[float, str]]) -> float:
    """Seconds from their "Beginning training." line to their "Closing envs" line (ValueError if one is missing)."""
    begin = next((when for when, line in stamped if BEGIN_MARK in line), None)
    end = next((when for when, line in stamped if END_MARK in line), None)
    if begin is None or end is None:
        raise ValueError(f"their log lacks {BEGIN_MARK!r} or {END_MARK!r}: the run did not finish its loop")
    return end - begin


def steady_rate(points: list[tuple[int, float]], skip: int) -> float | None:
    """Steps per second between the first episode end at or past ``skip`` steps and the last one (None: < 2)."""
    later = [(t, when) for t, when in points if t >= skip]
    if len(later) < 2 or later[-1][1] <= later[0][1]:
        return None
    (t0, w0), (t1, w1) = later[0], later[-1]
    return (t1 - t0) / (w1 - w0)


def cpu_model(cpuinfo: str) -> str:
    """The first processor of /proc/cpuinfo's text: its model name, then family, model, stepping and MHz where given
    (a virtual machine's model name can be as plain as "Intel(R) Xeon(R) Processor")."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the end of the first processor's block
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "unknown")
    details = [f"{label} {fields[key]}" for key, label in
               (("cpu family", "family"), ("model", "model"), ("stepping", "stepping"), ("cpu MHz", "MHz"))
               if fields.get(key)]
    return f"{name} ({', '.join(details)})" if details else name


def summary(env: str, steps: int, seconds: float, steady: float | None, skip: int) -> dict[str, object]:
    """The measured numbers of one run."""
    return {"env": env, "steps": steps, "loop_seconds": round(seconds, 3),
            "steps_per_second": round(steps / seconds, 1),
            "steady_steps_per_second": None if steady is None else round(steady, 1), "steady_from_step": skip}


def markdown(result: dict) -> str:
    """``result`` (summary plus machine and command) as a short markdown page."""
    m, s = result["machine"], result["summary"]
    steady = "n/a" if s["steady_steps_per_second"] is None else f"{s['steady_steps_per_second']:,}"
    rows = [
        ("environment", s["env"]), ("timed steps", f"{s['steps']:,}"), ("loop seconds", s["loop_seconds"]),
        ("env steps/s (whole loop)", f"{s['steps_per_second']:,}"),
        (f"env steps/s (episode ends from step {s['steady_from_step']:,})", steady),
        ("CPU", m["cpu"]), ("GPU", m["gpu"] or "none (CPU)"), ("torch", m["torch"]), ("numpy", m["numpy"]),
        ("python", m["python"]), ("torch CPU threads", m["torch_threads"]),
        ("authors' code", f"{result['code']} ({result['code_commit'] or 'commit unknown'})"),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    command = " ".join(result["command"])
    return (f"# The OPIQ authors' code, one process: {s['env']}\n\n"
            "Their own PyTorch code (not part of this project), run as a program by "
            "experiments/bench/authors_code_rate.py with OPIQ and the paper's settings, test episodes off; the rate is "
            "timed between the log lines that open and close their training loop.\n\n"
            f"| what | value |\n| --- | --- |\n{table}\n\n"
            f"Command (in the checkout, {result['thread_vars']}):\n\n```\n{command}\n```\n")


def probe(python: str, env: dict[str, str]) -> dict:
    """Versions, threads and GPU as seen by ``python`` (the interpreter that runs their code)."""
    done = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_stamped(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, list]:
    """Runs ``command``, stdout and stderr merged, each line stamped with ``time.monotonic()`` as it arrives."""
    stamped = []
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as proc:
        timer = threading.Timer(timeout, proc.kill)  # a silent hang is ended too
        timer.start()
        try:
            for line in proc.stdout:
                stamped.append((time.monotonic(), line.rstrip("\n")))
        finally:
            timer.cancel()
        return proc.wait(), stamped


def code_commit(code: Path) -> str | None:
    """The commit of the checkout: ``git rev-parse HEAD`` there, else the first word of its SOURCE_COMMIT file."""
    if (code / ".git").exists():
        done = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=False)
        if done.returncode == 0:
            return done.stdout.strip()
    marker = code / "SOURCE_COMMIT"
    return marker.read_text().split()[0] if marker.exists() and marker.read_text().split() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, required=True, help="Checkout of the authors' code (holds src/main.py).")
    parser.add_argument("--env", choices=sorted(PAPER_SETTINGS), default="chain")
    parser.add_argument("--steps", type=int, default=5000, help="Training steps (their t_max), all timed.")
    parser.add_argument("--python", default=sys.executable, help="Interpreter with their dependencies.")
    parser.add_argument("--threads", type=int, default=1, help="Torch CPU threads (OMP_NUM_THREADS).")
    parser.add_argument("--skip", type=int, default=None, help="Steady rate from this step (default: steps // 5).")
    parser.add_argument("--save", action="store_true",
                        help="Sacred's file observer on (save=True, as their README's maze command).")
    parser.add_argument("--timeout", type=float, default=1800.0, help="Seconds before their process is killed.")
    parser.add_argument("--out", type=Path, default=Path("results/authors-code-rate"))
    parser.add_argument("--force", action="store_true", help="Replace this environment's results already in --out.")
    args = parser.parse_args(argv)

    earlier = [f for f in (args.out / f"authors_{args.env}.{x}" for x in ("json", "md", "log")) if f.exists()]
    if earlier and not args.force:  # a second measurement (other threads, another machine) must not replace the first
        parser.error(f"{earlier[0]} exists: choose another --out, or --force to replace it")

    code = args.code.resolve()
    if not (code / "src" / "main.py").exists():
        parser.error(f"{code} holds no src/main.py: point --code at a checkout of the authors' code")
    env = thread_env(args.threads)
    # a path (not a name on PATH) made absolute without following links (a venv's python is one), since their
    # process starts in the checkout
    python = os.path.abspath(args.python) if os.sep in args.python else args.python
    try:
        command = build_command(python, args.env, args.steps, save=args.save)
    except ValueError as e:  # no steps to train
        parser.error(str(e))
    machine = probe(python, env)
    machine["cpu"] = cpu_model(Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").exists() \
        else platform.processor() or "unknown"

    rc, stamped = run_stamped(command, code, env, args.timeout)
    args.out.mkdir(parents=True, exist_ok=True)
    start = stamped[0][0] if stamped else 0.0
    log = args.out / f"authors_{args.env}.log"
    log.write_text("".join(f"{when - start:10.3f}  {line}\n" for when, line in stamped))
    if rc != 0:
        tail = "\n".join(line for _, line in stamped[-15:])
        print(f"their process exited with {rc} (log: {log}):\n{tail}", file=sys.stderr)
        return 1

    skip = args.steps // 5 if args.skip is None else args.skip
    seconds = loop_seconds(stamped)
    result = {"summary": summary(args.env, args.steps, seconds, steady_rate(progress(stamped), skip), skip),
              "machine": machine, "command": command, "cwd": str(code), "code": str(code),
              "code_commit": code_commit(code), "thread_vars": f"OMP_NUM_THREADS={args.threads} "
                                                               f"MKL_NUM_THREADS={args.threads}"}
    (args.out / f"authors_{args.env}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"authors_{args.env}.md").write_text(markdown(result))
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
