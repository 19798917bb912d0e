"""The ``opiq-jax`` command line: ``train``, ``sweep``, ``plot`` and ``bench``.

Every option is a documented dataclass field (tyro turns the docstrings into ``--help``). Values are
checked before anything is compiled; a bad one stops with a single ``opiq-jax: error: ...`` line
that says what to change.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import tyro

from .environments import environment_spec, method_hparams, static_for_env
from .methods import METHODS, get_method, program_name, program_parts
from .parts import PARTS, get_part

if TYPE_CHECKING:  # the runner imports gymnax, which starts JAX's backend: see join_processes
    from .runner import Experiment

HPARAM_OPTIONS = ("m", "c_action", "c_bootstrap", "beta", "epsilon_start", "epsilon_end", "epsilon_decay_steps",
                  "reward_subtract", "final_bias", "lr", "beta_dora", "beta_dora_action", "beta_rnd", "beta_bsp")


@dataclass
class Train:
    """Train one or more methods, many seeds each, as one compiled program; write a results folder."""

    env: str = "chain"
    """Environment: chain, maze, montezuma (Montezuma's Revenge through EnvPool; needs pip install -e '.[atari]'),
    or gymnax:NAME for any gymnax environment (e.g. gymnax:DeepSea-bsuite, gymnax:MountainCar-v0). The paper's
    hyperparameters for chain, maze and montezuma are the defaults of every option left unset; a gymnax environment
    gets the chain's."""
    env_arg: tuple[str, ...] = ()
    """gymnax only: KEY=VALUE pairs passed to the environment (constructor arguments such as size=20, or EnvParams
    fields such as max_steps_in_episode=500); values are parsed as Python literals."""
    method: tuple[str, ...] = ("opiq",)
    """Methods to run side by side (space separated): dqn, dqn_pc, dqn_rsubtract, dqn_rsubtract_pc, dqn_bias,
    dqn_bias_pc, dqn_dora, dqn_dora_oa, dqn_rnd, bsp, opiq, opiq_no_ob, opiq_no_pc. Each starts from the paper's
    best setting for the environment. Methods that differ only in numbers share one compiled program; DORA, RND and
    BSP each add networks and run as a program of their own (a subfolder of the results folder)."""
    seeds: int = 4
    """Independent runs per method."""
    steps: int | None = None
    """Environment steps per run (default: the paper's, 100k chain, 1M maze)."""
    out: Path | None = None
    """Results folder (default: results/<env>-<methods>-seeds<N>-steps<S>). An existing folder of the same
    experiment is resumed from its last checkpoint."""
    log_every: int | None = None
    """Steps between metric rows (default: 1,000 chain, 10,000 maze); must divide --steps."""
    seed: int = 0
    """Base seed; run i of every method uses seed i under it."""
    chain_length: int = 100
    """Chain states (chain only); the horizon is chain_length + 9."""
    count_features: Literal["simhash", "exact"] = "simhash"
    """What is counted: SimHash codes of the observation (the paper) or the exact cell id (no aliasing)."""
    simhash_bits: int | None = None
    """SimHash code length k (default: 32 chain, 128 maze)."""
    buffer_size: int | None = None
    """Replay capacity per run (default: 10k chain, 250k maze)."""
    batch_size: int | None = None
    """Minibatch size (default 64)."""
    n_step: int | None = None
    """n-step target length (default: 1 chain, 3 maze)."""
    target_update: int | None = None
    """Target network copy interval in steps (default: 200 chain, 1000 maze)."""
    hidden: tuple[int, ...] | None = None
    """MLP hidden widths (chain; default 256 256)."""
    precision: Literal["float32", "bfloat16"] = "float32"
    """The Q-network's precision: float32 (the paper) or bfloat16 (mixed precision for throughput: float32 weights
    and optimiser, bfloat16 forward and backward passes and target network; see StaticConfig.precision)."""
    maze_torso: Literal["auto", "xla", "pallas"] = "auto"
    """The maze network's convolutions: XLA's patch GEMMs, the Pallas kernels, or auto (Pallas on GPUs in
    bfloat16; see StaticConfig.maze_torso)."""
    target_values: Literal["auto", "table", "network"] = "auto"
    """The bootstrap targets' target-network values: looked up in a table of every cell filled at each target
    copy (chain, maze), the target network on every batch, or auto (the table in bfloat16; see
    StaticConfig.target_values)."""
    shared_action_mask: bool = False
    """Use one action randomisation for all runs (the reference code) instead of one per run (the paper)."""
    m: float | None = None
    """Override M, the exponent of the optimism bonus C/(N+1)^M (>= 0)."""
    c_action: float | None = None
    """Override C_action, the optimism scale used for action selection (>= 0)."""
    c_bootstrap: float | None = None
    """Override C_bootstrap, the optimism scale used for bootstrapping (>= 0)."""
    beta: float | None = None
    """Override beta, the scale of the intrinsic reward beta/sqrt(N) (>= 0)."""
    epsilon_start: float | None = None
    """Override the initial epsilon (in [0, 1])."""
    epsilon_end: float | None = None
    """Override the final epsilon (in [0, 1])."""
    epsilon_decay_steps: float | None = None
    """Override the number of steps of the linear epsilon decay (>= 0; 0 = fixed epsilon_end)."""
    reward_subtract: float | None = None
    """Override the constant subtracted from environment rewards (R-Subtract)."""
    final_bias: float | None = None
    """Override the initial output-layer bias (Bias)."""
    lr: float | None = None
    """Override the RMSProp learning rate (> 0; default 5e-4)."""
    beta_dora: float | None = None
    """Override DORA's intrinsic reward scale beta_dora / sqrt(-log E) (dqn_dora, dqn_dora_oa)."""
    beta_dora_action: float | None = None
    """Override DORA OA's action-selection bonus scale (dqn_dora_oa)."""
    beta_rnd: float | None = None
    """Override RND's intrinsic reward scale (dqn_rnd)."""
    beta_bsp: float | None = None
    """Override BSP's prior scale (bsp)."""
    bsp_heads: int = 10
    """BSP's number of heads K (paper: 10)."""
    envs_per_run: int = 1
    """Montezuma only: EnvPool environments per run (the pool holds runs x envs_per_run); step counts stay per run."""
    progress: bool = True
    """Show a progress bar."""
    plot: bool = True
    """Draw the plots into the results folder at the end."""
    distributed: bool = False
    """Several hosts: join them with jax.distributed.initialize() (detected on SLURM, Open MPI and Cloud TPU, or
    given by --coordinator, --num-processes and --process-id) and train this process's share of the runs (every
    num_processes-th run) on its local devices into <out>/process-<i>. When every process has finished,
    opiq-jax plot <out> reads the process folders as one experiment."""
    coordinator: str | None = None
    """--distributed: HOST:PORT of process 0 (implies --distributed)."""
    num_processes: int | None = None
    """--distributed: the number of processes (one per host)."""
    process_id: int | None = None
    """--distributed: this process's index in [0, num_processes)."""


@dataclass
class Plot:
    """Draw the median across seeds with the 25-75% band per method for a results folder (PNG files)."""

    folder: tyro.conf.Positional[Path]
    """A results folder written by ``opiq-jax train``."""
    metrics: tuple[str, ...] = ("train_return", "test_return", "states_visited", "max_return")
    """Metrics to plot, one PNG each."""


@dataclass
class Sweep:
    """Run a grid of settings x methods x seeds as few compiled programs as memory allows, then rank the
    settings of each method by the area under the median curve (the paper's selection protocol)."""

    preset: tyro.conf.Positional[str]
    """A shipped preset (chain_opiq, chain_baselines, maze_opiq, maze_baselines) or the path of a JSON file
    written like them (see opiq_jax/presets/)."""
    out: Path | None = None
    """Results folder (default results/sweep-<preset>); an interrupted sweep resumes where it stopped."""
    max_batch_runs: int | None = None
    """Cap on runs per compiled batch (default: as many as fit in device memory)."""
    precision: Literal["float32", "bfloat16"] | None = None
    """Override the preset's Q-network precision (default: the preset's, float32 in the shipped ones; see
    opiq-jax train --help). The default results folder then ends in -bfloat16."""
    progress: bool = True
    """Show a progress bar."""


class UsageError(ValueError):
    """A bad command-line value; reported as one line."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def all_hparam_options() -> dict:
    """Every hyperparameter a method may have: the trainer's and every registered part's."""
    from .config import hparam_options

    get_part("pseudocounts")  # the built-in parts register on first use
    return hparam_options(PARTS.values())


def hparam_overrides(args: Train) -> dict[str, float]:
    """The hyperparameters set on the command line, checked against their declarations (one-line errors)."""
    options = all_hparam_options()
    overrides = {k: float(getattr(args, k)) for k in HPARAM_OPTIONS if getattr(args, k) is not None}
    for name, value in overrides.items():
        message = options[name].problem(value)
        _check(message is None, message or "")
    return overrides


def overrides_per_method(methods: tuple[str, ...], overrides: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each method's share of ``overrides``: the ones its parts declare; an override no method has is refused."""
    options = {m: get_method(m).options() for m in methods}
    for name in overrides:
        _check(any(name in o for o in options.values()),
               f"--{name.replace('_', '-')} applies to none of {', '.join(methods)} (no part of theirs has it)")
    return {m: {k: v for k, v in overrides.items() if k in options[m]} for m in methods}


def parse_env_args(pairs: tuple[str, ...]) -> tuple[tuple[str, object], ...]:
    """``("size=20", "deterministic=True")`` -> ``(("size", 20), ("deterministic", True))``."""
    import ast

    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        _check(bool(sep) and key.isidentifier(), f"--env-arg takes KEY=VALUE pairs, got {pair!r}")
        try:
            parsed.append((key, ast.literal_eval(value)))
        except (ValueError, SyntaxError):
            parsed.append((key, value))
    return tuple(parsed)


def build_experiment(args: Train) -> tuple[Experiment, Path]:
    """Validates ``args`` and turns them into an :class:`Experiment` (no compilation)."""
    from .runner import Experiment, RunSpec, check_fits
    try:
        environment_spec(args.env)
    except ValueError as e:
        raise UsageError(f"{e} (e.g. gymnax:DeepSea-bsuite)") from None
    if args.env == "montezuma":
        from opiq_jax.envs.montezuma import ENVPOOL_MISSING

        try:
            import envpool  # noqa: F401
        except ImportError:
            raise UsageError(ENVPOOL_MISSING) from None
    _check(not args.env_arg or args.env.startswith("gymnax:"), "--env-arg applies to gymnax:NAME environments only")
    unknown = [m for m in args.method if m not in METHODS]
    _check(not unknown, f"unknown method {', '.join(unknown)}: use any of {', '.join(METHODS)}")
    _check(len(set(args.method)) == len(args.method), "each --method may appear once")
    _check(args.seeds >= 1, f"--seeds must be >= 1, got {args.seeds}")
    _check(args.bsp_heads >= 2, f"--bsp-heads must be >= 2, got {args.bsp_heads}")
    overrides = hparam_overrides(args)
    static_overrides = {
        k: v for k, v in dict(
            total_steps=args.steps, log_every=args.log_every, simhash_bits=args.simhash_bits,
            buffer_size=args.buffer_size, batch_size=args.batch_size, n_step=args.n_step,
            target_update=args.target_update, hidden=args.hidden,
        ).items() if v is not None
    }
    if args.envs_per_run != 1:
        static_overrides["envs_per_run"] = args.envs_per_run
    if args.env == "chain":
        static_overrides["chain_length"] = args.chain_length
    static_overrides.update(count_features=args.count_features, shared_action_mask=args.shared_action_mask,
                            precision=args.precision, maze_torso=args.maze_torso,
                            target_values=args.target_values)
    if args.env_arg:
        static_overrides["env_kwargs"] = parse_env_args(args.env_arg)
    total = static_overrides.get("total_steps")
    if total is not None and "log_every" not in static_overrides:
        default_log = static_for_env(args.env).log_every
        static_overrides["log_every"] = default_log if total % default_log == 0 else total
    try:
        static = static_for_env(args.env, bsp_heads=args.bsp_heads, **static_overrides)
        if args.env.startswith("gymnax:"):
            from .trainer import make_path

            make_path(static)  # a missing package or an unknown name fails here, in one line
    except (ValueError, ImportError) as e:
        raise UsageError(str(e)) from None
    try:
        shares = overrides_per_method(args.method, overrides)
        settings = {method: method_hparams(args.env, method, **shares[method]) for method in args.method}
    except ValueError as e:  # a method the environment does not offer
        raise UsageError(str(e)) from None
    per_program: dict[str, list[str]] = {}
    for method in args.method:
        per_program.setdefault(program_name(get_method(method).part_names), []).append(method)
    try:  # before building the runs: a huge --seeds must fail here, not exhaust the host's memory
        for methods in per_program.values():
            check_fits(dataclasses.replace(static, parts=program_parts(methods)), len(methods) * args.seeds)
    except (ValueError, ImportError) as e:
        raise UsageError(str(e)) from None
    runs = tuple(RunSpec(method=method, setting=setting_label(shares[method]), seed=seed, hparams=settings[method])
                 for method in args.method for seed in range(args.seeds))
    experiment = Experiment(static=static, runs=runs, seed=args.seed)
    out = args.out or Path("results") / f"{args.env.replace(':', '-')}-{'-'.join(args.method)}-seeds{args.seeds}-steps{static.total_steps}"
    return experiment, out


def join_processes(args: Train) -> tuple[int, int]:
    """``jax.distributed.initialize`` from the options (or the detected cluster): this process's index and the count."""
    import jax

    given = [args.num_processes is not None, args.process_id is not None]
    _check(all(given) or (not any(given) and args.coordinator is None),
           "--coordinator, --num-processes and --process-id go together (or none of them, where the cluster is detected)")
    try:
        jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                                   process_id=args.process_id)
    except (ValueError, RuntimeError) as e:
        raise UsageError(f"--distributed: {e}") from None
    return jax.process_index(), jax.process_count()


def share_of_this_process(experiment: Experiment, out: Path, index: int, count: int) -> tuple[Experiment, Path]:
    """This process's runs and results folder. Runs never communicate, so the processes only agree on who
    trains what: each trains its share on its own devices and writes its own folder."""
    from .runner import process_share

    try:
        share = process_share(experiment, index, count)
    except ValueError as e:
        raise UsageError(f"--distributed: {e}") from None
    print(f"opiq-jax: process {index} of {count} trains {len(share.runs)} of {len(experiment.runs)} runs; "
          f"when all have finished, opiq-jax plot {out} reads them together", flush=True)
    return share, out / f"process-{index}"


def train(args: Train) -> Path:
    distributed = args.distributed or any(v is not None for v in (args.coordinator, args.num_processes, args.process_id))
    process = join_processes(args) if distributed else None  # before anything imports gymnax
    from .plotting import markdown_table, plot_folder, summary_table
    from .runner import read_metrics, run_methods

    experiment, out = build_experiment(args)
    if process is not None:
        experiment, out = share_of_this_process(experiment, out, *process)
    print(f"opiq-jax: {len(experiment.runs)} runs ({', '.join(args.method)} x {args.seeds} seeds) on {args.env}, "
          f"{experiment.static.total_steps:,} steps each -> {out}", flush=True)
    started = time.time()
    try:
        run_methods(experiment, out, progress=args.progress)
    except ValueError as e:  # a results folder of another experiment, or too many runs for the device
        raise UsageError(str(e)) from None
    print(f"opiq-jax: finished in {time.time() - started:.0f} s", flush=True)
    rows = read_metrics(out)
    print(markdown_table(summary_table(rows, "train_return"), "train_return"))
    if args.plot:
        metrics = ("train_return", "max_return", "rooms_visited") if args.env == "montezuma" else None
        for path in plot_folder(out, *(metrics,) if metrics else ()):
            print(f"opiq-jax: wrote {path}")
    return out


def sweep(args: Sweep) -> None:
    from .sweep import load_preset, run_sweep

    try:
        preset = load_preset(args.preset)
    except (ValueError, KeyError) as e:
        raise UsageError(str(e)) from None
    _check(args.max_batch_runs is None or args.max_batch_runs >= 1, "--max-batch-runs must be >= 1")
    if args.precision is not None:
        preset = dataclasses.replace(preset, static={**preset.static, "precision": args.precision})
    suffix = f"-{args.precision}" if args.precision and args.precision != "float32" else ""
    out = args.out or Path("results") / f"sweep-{Path(args.preset).stem}{suffix}"
    try:
        run_sweep(preset, out, progress=args.progress, max_batch_runs=args.max_batch_runs)
    except ValueError as e:  # a batch folder of another experiment, or too many runs for the device
        raise UsageError(str(e)) from None


def setting_label(overrides: dict[str, float]) -> str:
    """The label of a run's setting: its overrides in name order, or ``paper``."""
    return ",".join(f"{k}={v:g}" for k, v in sorted(overrides.items())) or "paper"


def plot(args: Plot) -> None:
    from .plotting import plot_folder

    from .runner import experiment_folders

    _check(bool(experiment_folders(args.folder)), f"{args.folder} holds no metrics.csv: pass a folder written by opiq-jax train")
    for path in plot_folder(args.folder, tuple(args.metrics)):
        print(f"opiq-jax: wrote {path}")


def main(argv: list[str] | None = None) -> None:
    from .bench.options import Bench

    command = tyro.extras.subcommand_cli_from_dict(
        {"train": Train, "sweep": Sweep, "plot": Plot, "bench": Bench}, args=argv, prog="opiq-jax")
    try:
        if isinstance(command, Train):
            train(command)
        elif isinstance(command, Sweep):
            sweep(command)
        elif isinstance(command, Bench):
            try:
                command.validate()
            except ValueError as e:
                raise UsageError(str(e)) from None
            from .bench.throughput import run_bench

            run_bench(command)
        else:
            plot(command)
    except UsageError as e:
        print(f"opiq-jax: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
