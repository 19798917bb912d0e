"""The package's import graph flows one way: no circle, and no module imports one from a folder above its own.

The graph is read from the sources (``ast``), so it counts every import: at the top of a module, inside a function,
and under ``TYPE_CHECKING``. The folders are the house as docs/design.md draws it, from the ground up (``FLOORS``);
a module may import its own folder's modules (the no-circle check keeps those one way) and any folder below.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the ground: configuration and errors; the environments' dynamics", ("opiq_jax.common", "opiq_jax.envs")),
    ("the kernels (Pallas)", ("opiq_jax.kernels",)),
    ("the primitives (counts, replay, targets, networks, a run's state) and the results store",
     ("opiq_jax.primitives", "opiq_jax.store")),
    ("the agent's parts: the contracts an environment composes, exploration parts, the registries",
     ("opiq_jax.contracts", "opiq_jax.parts", "opiq_jax.registry")),
    ("the agent and its strategies", ("opiq_jax.agent",)),
    ("an experiment: its runs and programs, compiled, their memory, its results folder read back", ("opiq_jax.runs",)),
    ("reporting: statistics, figures, live tracking", ("opiq_jax.reporting",)),
    ("the host: the plan, the host loop, programs in processes, sweeps", ("opiq_jax.host",)),
    ("the throughput benchmark, a tool beside the agent", ("opiq_jax.benchmark",)),
    ("the faces: the compiled core's pure functions, the Python API, the command line, its entry point", (
        "opiq_jax.program", "opiq_jax.api", "opiq_jax.cli", "opiq_jax.launch", "opiq_jax.__main__")),
)
"""The package from the ground up, each floor its folders (subpackages) or, at the top, the modules at the root.
The folders are in one order, top to bottom of this list: a module imports its own folder's modules and those of
folders before its own, so two folders of one floor are ordered too (parts read contracts, registries read parts)."""
FOLDERS = tuple(folder for _, folders in FLOORS for folder in folders)
FACES = ("program", "api", "cli", "launch", "__main__")  # the modules at the root


def package_modules() -> dict[str, Path]:
    """Every module of the package by dotted name: ``opiq_jax/`` and ``envs/``, which installs as ``opiq_jax.envs``
    (pyproject.toml's package-dir)."""
    found = {}
    for top, package in ((ROOT / "opiq_jax", ("opiq_jax",)), (ROOT / "envs", ("opiq_jax", "envs"))):
        for folder, subfolders, files in os.walk(top):
            subfolders[:] = [s for s in subfolders if s != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    parts = [*package, *Path(folder, name).relative_to(top).with_suffix("").parts]
                    found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = Path(folder, name)
    return found


def imported_modules(name: str, path: Path, modules: dict[str, Path], tree: ast.AST | None = None) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source (or in ``tree``, a part of it): the
    deepest module each import names."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets = []
    for node in ast.walk(tree or ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + [node.module] * bool(node.module)) \
                if node.level else node.module
            targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    found = set()
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def folder_of(module: str) -> int | None:
    """The index in :data:`FOLDERS` of the folder (or face) that holds ``module``; the package's ``__init__`` is the
    ground's (it imports nothing at the top but the table of old names)."""
    if module == "opiq_jax":
        return 0
    for index, folder in enumerate(FOLDERS):
        if module == folder or module.startswith(folder + "."):
            return index
    return None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_package_import_graph_has_no_circle():
    graph = import_graph()
    # the graph was read
    assert len(graph) > 40 and "opiq_jax.host.host_loop" in graph["opiq_jax.host.train_programs"]
    assert circles(graph) == []


def test_every_module_lies_in_a_declared_folder_and_only_the_faces_at_the_root():
    graph = import_graph()
    undeclared = sorted(m for m in graph if folder_of(m) is None)
    assert undeclared == [], f"declare the folder of {undeclared} in tests/test_layers.py (and docs/design.md)"
    subpackages = {f"opiq_jax.{p.parent.name}" for p in (ROOT / "opiq_jax").glob("*/__init__.py")} | {"opiq_jax.envs"}
    assert subpackages == {f for f in FOLDERS if f.count(".") == 1 and not f.endswith(FACES)}


def test_no_module_imports_one_from_a_folder_above_its_own():
    graph = import_graph()
    upward = [f"{m} ({FOLDERS[folder_of(m)]}) imports {t} ({FOLDERS[folder_of(t)]})"
              for m, targets in sorted(graph.items()) for t in sorted(targets) if folder_of(t) > folder_of(m)]
    assert upward == []


def test_the_design_page_draws_every_folder():
    design = (ROOT / "docs" / "design.md").read_text()
    named = {f: f.removeprefix("opiq_jax.") + (".py" if f.endswith(FACES) else "/")
             for f in FOLDERS}
    missing = [f for f, name in named.items() if name not in design]
    assert missing == [], f"docs/design.md's house lacks {missing}"


@pytest.mark.parametrize("source, expected", [
    ("import opiq_jax.agent.trainer\n", [["opiq_jax.a", "opiq_jax.agent.trainer"]]),
    ("def f():\n    from .agent.trainer import Agent\n", [["opiq_jax.a", "opiq_jax.agent.trainer"]]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .agent import trainer\n",
     [["opiq_jax.a", "opiq_jax.agent.trainer"]]),
    ("import json\n", []),
])
def test_the_graph_reader_finds_an_import_wherever_it_stands(tmp_path, source, expected):
    """A module ``a`` that the trainer imports, importing the trainer back: a circle, however the import is written."""
    path = tmp_path / "a.py"
    path.write_text(source)
    modules = {**package_modules(), "opiq_jax.a": path}
    graph = {"opiq_jax.agent.trainer": {"opiq_jax.a"}, "opiq_jax.a": imported_modules("opiq_jax.a", path, modules)}
    assert circles(graph) == expected


def function_local_imports() -> set[tuple[str, str]]:
    """``(module, imported module)`` for every import of the package's own modules inside a function."""
    modules, found = package_modules(), set()
    for name, path in modules.items():
        for function in ast.walk(ast.parse(path.read_text())):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = ast.Module(body=function.body, type_ignores=[])
                found |= {(name, target) for target in imported_modules(name, path, modules, body)}
    return found


def test_imports_stand_at_the_top_of_their_modules_but_the_entry_points_and_gymnax():
    """The entry point joins the hosts before the command line (and with it the trainer, which starts JAX's
    backend) is imported; gymnax's registry is imported only for a gymnax environment or an object adapted (a
    MiniGrid task, a MinAtar game or a Craftax game among them)."""
    assert function_local_imports() == {("opiq_jax.launch", "opiq_jax.cli"),
                                        ("opiq_jax.registry.environments", "opiq_jax.envs.gymnax_adapter"),
                                        ("opiq_jax.envs.minigrid", "opiq_jax.envs.gymnax_adapter"),
                                        ("opiq_jax.envs.minatar", "opiq_jax.envs.gymnax_adapter"),
                                        ("opiq_jax.envs.craftax", "opiq_jax.envs.gymnax_adapter")}


def test_the_opiq_jax_command_enters_through_the_launcher_which_refuses_half_a_host_list_in_one_line():
    import subprocess
    import sys
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"opiq-jax": "opiq_jax.launch:main"}
    ended = subprocess.run([sys.executable, "-m", "opiq_jax", "train", "--num-processes", "2"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert ended.returncode == 2 and ended.stdout == "", ended
    assert ended.stderr.strip() == ("opiq-jax: error: --coordinator, --num-processes and --process-id go together (or "
                                    "none of them, where the cluster is detected)")


def test_the_trainer_and_the_parts_read_the_path_its_counting_and_replay_through_their_declared_contracts():
    """Both steppings implement every method of ``Stepping``, both counters every method of ``Counting`` and both
    replays every method of ``Replay``; what the trainer and the parts read of each is declared there (capabilities
    included: never probed with getattr), the trainer never types them ``Any``, and no part reads a replay item's
    field by name."""
    import re

    from opiq_jax.contracts import Counting, Stepping, Replay
    from opiq_jax.contracts.compact import CompactCounting, CompactStepping, CompactReplay
    from opiq_jax.contracts.pool import FrameCounting, FrameRingReplay, PoolStepping

    for stepping in (CompactStepping, PoolStepping):
        assert issubclass(stepping, Stepping) and not stepping.__abstractmethods__, stepping
    for replay in (CompactReplay, FrameRingReplay):
        assert issubclass(replay, Replay) and not replay.__abstractmethods__, replay
    for counting in (CompactCounting, FrameCounting):
        assert issubclass(counting, Counting) and not counting.__abstractmethods__, counting
    readers = [ROOT / "opiq_jax" / "agent" / "trainer.py", *sorted((ROOT / "opiq_jax" / "parts").glob("*.py"))]
    sources = {p.name: p.read_text() for p in readers}
    # the replay as the agent holds it (``primitives.replay``, the ring's functions, is a module of the same name)
    for name, reader, contract, least in (("stepping", r"\bstepping", Stepping, 20),
                                          ("replay", r"\b(?:agent|self|stepping)\.replay", Replay, 6),
                                          ("counting", r"\b(?:agent|self|stepping)\.counting", Counting, 5)):
        read = {field for text in sources.values() for field in re.findall(reader + r"\.([a-z_]+)", text)}
        declared = {*dir(contract), *contract.__annotations__}
        assert len(read) >= least and read <= declared, (name, sorted(read - declared))
        assert not re.search(rf"getattr\((agent\.|self\.)?{name}\b", "".join(sources.values()))
        assert not re.search(rf"{name}: Any\b", sources["trainer.py"])
    # the compact replay's Transition fields (not flax's ``nn.compact``, nor the module ``contracts.compact``): the
    # parts see Steps instead
    item_field = r"(?<!nn)(?<!contracts)\.((?:next_)?compact)\b"
    assert not [(n, f) for n, text in sources.items() for f in re.findall(item_field, text)]


def test_experiments_use_the_public_api_or_say_in_one_line_why_they_reach_inside():
    """An experiment that imports a module of the package beyond the public ones (``opiq_jax``, ``opiq_jax.reporting``,
    the environments) says why in its docstring."""
    silent = []
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        tree = ast.parse(path.read_text())
        inside = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                  and (node.module or "").startswith("opiq_jax.") and node.module not in PUBLIC_MODULES
                  and not node.module.startswith("opiq_jax.envs")}
        if inside and "Reaches inside: " not in (ast.get_docstring(tree) or ""):
            silent.append(f"{path.relative_to(ROOT)}: {sorted(inside)}")
    assert silent == []


PUBLIC_MODULES = ("opiq_jax", "opiq_jax.reporting")  # and the environments, opiq_jax.envs.*, which know nothing of it


def package_names_used(tree: ast.AST) -> set[str]:
    """``module:name`` for every name a script takes from the package: ``from opiq_jax.X import name``, ``import
    opiq_jax.X`` (``opiq_jax.X:*``) and ``opiq_jax.name`` read as an attribute."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "opiq_jax":
            used |= {f"{node.module}:{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            used |= {f"{a.name}:*" for a in node.names if a.name.startswith("opiq_jax.")}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "opiq_jax":
            used.add(f"opiq_jax:{node.attr}")
    return used


def test_the_papers_scripts_use_only_the_public_api():
    """experiments/paper reproduces the paper's figures as a user would: with the names ``opiq_jax`` and
    ``opiq_jax.reporting`` export (their ``__all__``) and the environments, nothing else of the package."""
    import importlib

    public = {f"{m}:{name}" for m in PUBLIC_MODULES for name in importlib.import_module(m).__all__}
    reached = {}
    for path in sorted((ROOT / "experiments" / "paper").glob("*.py")):
        used = package_names_used(ast.parse(path.read_text()))
        inside = sorted(u for u in used if u not in public and not u.startswith("opiq_jax.envs"))
        if inside:
            reached[path.name] = inside
    assert reached == {}


def test_the_public_name_reader_catches_every_way_of_taking_one():
    source = ("import opiq_jax\nimport opiq_jax.runs.compiled\nfrom opiq_jax.primitives import counts\n"
              "x = opiq_jax.train\n")
    assert package_names_used(ast.parse(source)) == {"opiq_jax.runs.compiled:*", "opiq_jax.primitives:counts",
                                                     "opiq_jax:train"}


EXPERIMENT_FOLDERS = {"paper", "studies", "bench", "tools"}


def test_experiments_sit_in_the_folder_of_their_kind():
    """experiments/ holds no script of its own: each sits in paper/ (the paper's figures and tables), studies/
    (beyond the paper), bench/ (speed and size) or tools/ (checks of the project itself), and each folder says so."""
    loose = sorted(p.name for p in (ROOT / "experiments").glob("*.py") if p.name != "__init__.py")
    folders = {p.name for p in (ROOT / "experiments").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert loose == [] and folders == EXPERIMENT_FOLDERS
    for folder in folders:
        assert ast.get_docstring(ast.parse((ROOT / "experiments" / folder / "__init__.py").read_text()))


SCRIPT_ENTRY_POINTS = {"main", "Args"}
"""What a test of a script may take from it besides its constants (UPPER_CASE): its command, run as a user runs it."""
HAND_CHECKED: dict[str, dict[str, str]] = {
    "test_tabular.py": {"*": "tabular.py is the paper's tabular algorithm (Algorithm 1): the theory's checks test its "
                             "functions one by one"},
    "test_properties.py": {"*": "the tabular algorithm's properties, as in test_tabular.py"},
    "test_provenance.py": dict.fromkeys(("cited_folders", "index_text", "top_folders"),
                                        "the committed index is checked against what the index tool makes of the "
                                        "folders"),
    "test_algorithm_properties.py": dict.fromkeys(("cited_folders", "citing_pages", "index_text"),
                                                  "a cited sub-folder is checked against what the index tool makes "
                                                  "of a made-up tree of folders"),
    "test_program_identity.py": {
        **dict.fromkeys(("compare", "row_text"), "two revisions that differ would lower every program twice more: "
                        "the rows of a change are checked on made-up hashes and opcode counts"),
        "program_hashes": "compiling in two worktrees costs twice a revision's programs: --compiled-ops is checked "
                          "on one tree's chain program in one process",
    },
    "test_montezuma_bench.py": {"table": "a sound run has no compile in its timed windows: the table's note for one "
                                         "is checked on made-up rows"},
    "test_multi_gpu_scaling.py": {"count_collectives": "the chain's programs on two CPU devices hold no collective: "
                                                       "the parser is checked on hand-written HLO"},
    "test_regression_illustration.py": {"Figure": "replaced by a subclass that keeps the figures the script draws "
                                                  "without pyplot"},
    "test_bench_revisions.py": {
        **dict.fromkeys(("run_job", "Job", "default_jobs"), "a real job is a GPU's minutes: the subprocesses are "
                        "replaced by fixed rates, and one failing command is run"),
        **dict.fromkeys(("table", "parse_trees"), "a job that never ran and bad --trees are checked on their own"),
        "child_environment": "the card the waiting process would hold exists only on a GPU machine: what its children "
                             "get is checked on its own",
    },
    "test_evidence_scripts.py": {"command_line": "not a script but the helper every script's record names its call "
                                                 "with: checked alone on the argument lists a main receives"},
    "test_learned_count_cost.py": {
        **dict.fromkeys(("time_trainer",), "a real run is a GPU's minutes: the timer is replaced by fixed rates, and "
                        "one real chain row is timed alone"),
        **dict.fromkeys(("plan", "count_name", "table"), "Montezuma's plan needs EnvPool and its minutes, and an "
                        "out-of-memory row cannot be made to happen in a test run: both are checked on their own"),
    },
    "test_suite_throughput.py": {"unless_out_of_memory": "a card cannot be made to run out of memory in a test "
                                                        "run: the benches' shared helper for such rows is checked "
                                                        "on made-up errors"},
    "test_suites_study.py": {"suite_score": "a success or an achievement cannot be made to happen in a test run's "
                                            "few hundred steps: the scores are checked on made-up metrics (the "
                                            "command runs in test_minigrid.py and test_craftax.py)"},
    "test_throughput_table.py": {
        **dict.fromkeys(("FrameCounts", "Replay", "SimHashCounts"),
                        "torch is not in the test install: the PyTorch loop's NumPy pieces are checked alone"),
        **dict.fromkeys(("table_row", "emulators_note"),
                        "the torch columns and an out-of-memory baseline cannot be made to happen in a test run"),
    },
}
"""The tests that take more of a script than its command, and why: every other test of ``experiments/`` runs it."""


def experiment_names_taken(tree: ast.AST) -> set[str]:
    """The names of ``experiments`` modules a test takes (``module.name``), but modules themselves."""
    modules, taken = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "experiments":
            folder = ROOT / node.module.replace(".", "/")
            for alias in node.names:
                if (folder / f"{alias.name}.py").is_file():
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                else:
                    taken.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            taken |= {f"{a.name}.*" for a in node.names if a.name.split(".")[0] == "experiments"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            taken.add(f"{modules[node.value.id]}.{node.attr}")
    return taken


def beyond_the_command(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last not in SCRIPT_ENTRY_POINTS and not last.isupper()  # UPPER_CASE: a constant


def test_tests_of_the_scripts_run_their_commands():
    """A test of a script calls its ``main`` (or runs it as ``python -m``) and reads what it wrote, so that a script's
    inside can change without its tests; the few that check a piece by hand are listed, each with why, and the list
    holds no name that is no longer taken."""
    beyond, listed_unused = {}, []
    for path in sorted((ROOT / "tests").glob("*.py")):
        names = {n for n in experiment_names_taken(ast.parse(path.read_text())) if beyond_the_command(n)}
        allowed = HAND_CHECKED.get(path.name, {})
        if "*" in allowed:
            continue
        rest = sorted(n for n in names if n.rsplit(".", 1)[-1] not in allowed)
        if rest:
            beyond[path.name] = rest
        listed_unused += [f"{path.name}: {k}" for k in allowed if not any(n.endswith(f".{k}") for n in names)]
    assert beyond == {} and listed_unused == []
    assert set(HAND_CHECKED) <= {p.name for p in (ROOT / "tests").glob("*.py")}


def test_the_script_name_reader_sees_imports_and_attributes():
    source = ("from experiments.paper import fig5_analysis as fa\nfrom experiments.paper.tabular import q_plus, main\n"
              "import experiments.tools.before_after\nfa.main([])\nfa.seed_table([])\nx = fa.GOAL_REWARD\n")
    taken = experiment_names_taken(ast.parse(source))
    assert taken == {"experiments.paper.fig5_analysis.main", "experiments.paper.fig5_analysis.seed_table",
                     "experiments.paper.fig5_analysis.GOAL_REWARD", "experiments.paper.tabular.q_plus",
                     "experiments.paper.tabular.main", "experiments.tools.before_after.*"}
    assert sorted(n for n in taken if beyond_the_command(n)) == [
        "experiments.paper.fig5_analysis.seed_table", "experiments.paper.tabular.q_plus",
        "experiments.tools.before_after.*"]


ENVIRONMENT_NAMES = ("chain", "maze", "montezuma")
ENVIRONMENT_PREFIXES = ("atari:", "gymnax:")
OWN_MODULE = ROOT / "opiq_jax" / "registry" / "environments.py"


def environment_name_tests(tree: ast.AST) -> list[int]:
    """Lines that decide something by an environment's name: a comparison with one (``env == "chain"``,
    ``env in ("chain", "maze")``) or a test of its prefix (``env.startswith("gymnax:")``)."""
    def names_one(node: ast.AST) -> bool:
        values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return any(isinstance(v, ast.Constant) and v.value in ENVIRONMENT_NAMES for v in values)

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(names_one(n) for n in [node.left, *node.comparators]):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
              and any(isinstance(a, ast.Constant) and str(a.value) in ENVIRONMENT_PREFIXES for a in node.args)):
            lines.append(node.lineno)
    return lines


def test_no_module_decides_by_an_environments_name_but_the_registry():
    """An environment declares its options, label and checks in the registry (``EnvironmentSpec``); the plan, the
    figures and the bench ask it instead of naming it."""
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "opiq_jax").rglob("*.py"))
             if path != OWN_MODULE for line in environment_name_tests(ast.parse(path.read_text()))]
    assert found == []


@pytest.mark.parametrize("source, caught", [
    ("if env == 'chain':\n    pass\n", True), ("ok = static.env in ('maze', 'x')\n", True),
    ("ok = name.startswith('gymnax:')\n", True), ("ok = env == 'cartpole'\n", False),
    ("table = {'chain': 1}\n", False),
])
def test_the_name_reader_catches_every_way_of_naming_one(source, caught):
    assert bool(environment_name_tests(ast.parse(source))) == caught


def test_the_environments_per_run_come_from_the_stepping_alone():
    """``E`` has one source: the stepping's ``environments_per_run`` of the option. Outside the contracts, the
    registry and the configuration that declares the option, the option is read only to hand it to
    ``registry.environments.envs_per_run``; the trainer and the parts read the stepping's (``agent.envs_per_run``)."""
    import re

    from opiq_jax.registry.environments import envs_per_run

    assert envs_per_run("chain", 4) == 1 and envs_per_run("maze", 1) == 1
    assert envs_per_run("montezuma", 8) == 8 and envs_per_run("atari:Venture", 2) == 2
    exempt = {"contracts", "registry"}
    strays = []
    for path in sorted((ROOT / "opiq_jax").rglob("*.py")):
        relative = path.relative_to(ROOT / "opiq_jax")
        if relative.parts[0] in exempt or relative.as_posix() == "common/config.py":
            continue
        text = path.read_text().replace("envs_per_run(static.env, static.envs_per_run)", "")
        reads = re.findall(r"\b(?!agent\.|self\.|path\.|stepping\.)\w+\.envs_per_run\b", text)
        strays += [f"{relative}: {read}" for read in reads]
    assert strays == []
