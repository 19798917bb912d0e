"""Provenance of the documentation: every results folder that README.md or docs/*.md cites is complete.

What counts as cited: every markdown link or image (``[text](path)``, ``![alt](path)``) whose target
resolves, relative to the page, to a path under ``docs/results/``, and every literal ``docs/results/...``
path written anywhere in those pages. A cited file stands for the folder that holds it.

The rule for a cited folder F. Each item may be found in F, in a folder below F, or in a folder above F
up to its top-level results folder ``docs/results/<name>/``. A family's README.md may document its
subfolders, and a derived subfolder inherits its parent's run.

1. **Command**: a ``README.md`` or ``command.txt`` whose text contains a command line, ``opiq-jax ...`` or
   ``python -m experiments...``.
2. **Metrics**: ``metrics.csv`` or ``metrics.csv.gz``. A non-training result (a benchmark, a profile, a
   tabular experiment, a sweep's table, an analysis) may instead have a data file: a ``.csv``,
   ``.csv.gz`` or ``.json`` other than ``config.json``, ``run_info.json`` and ``preset.json``.
3. **Configuration**: ``config.json`` or ``preset.json``. A non-training result may instead have a
   JSON data file that records its settings under a top-level key ``options``, ``settings``,
   ``static``, ``command`` or ``commands``. This is what rejects a training folder that kept only its
   summaries: a runner's ``summary.json`` records no settings, and such a folder has no
   ``config.json``.
4. **Run info**: a ``run_info.json`` with a ``device`` and a wall-clock, meaning a key whose name
   contains ``seconds`` and whose value is a number, or a list or mapping of numbers.

A comparison folder holds a ``before_after.md`` (written by ``python -m experiments.tools.before_after``),
whose first lines name its two input folders. It needs a command (1). Each of its input folders must
itself be complete by this rule, and must be under ``docs/results/``.

The README's tables: every number in a table's cells (its first column excepted) appears, to the table's
precision, in a text file of a folder that the table or the paragraph above it cites.

Every record (``run_info.json``, ``timeboxed.json``) under ``docs/results/`` names the ``revision`` its code ran
at, a commit of the history, and ``tree_clean``: true, false with what was ``uncommitted`` (its folder's README
says so), or null with the ``provenance`` that says why it is unknown. No file there holds an absolute path of the
machine that wrote it (``/root/...``, ``/tmp/...``, ...). The writers' helpers, ``source_revision`` and
``portable``, are checked here too.

The pages themselves: README.md is at most 12,288 bytes. No page carries an internal issue number
("#12", "issue 21"). No page refers to the internal notes (REFERENCE.md, DESIGN.md) or to paths outside
the repository (``../shared``).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.tools.results_index import INDEX, LINK, cited_folders, index_text, top_folders
from opiq_jax.reporting import portable, source_revision
from opiq_jax.host.host_loop import earlier_revisions_of

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"(opiq-jax \w|python -m experiments\.|bash \.ci/run)")  # the last: the tests' own timing
NOT_DATA = {"config.json", "run_info.json", "preset.json"}
SETTINGS_KEYS = {"options", "settings", "static", "command", "commands"}


def _scope(folder: Path) -> list[Path]:
    """The folders whose files count for ``folder``: itself, those below it, those above it up to its top."""
    below = [p for p in folder.rglob("*") if p.is_dir()]
    above, p = [], folder.parent
    while p != RESULTS and RESULTS in p.parents:
        above.append(p)
        p = p.parent
    return [folder, *below, *above]


def _files(folders: list[Path]) -> list[Path]:
    return [f for d in folders for f in d.iterdir() if f.is_file()]


def _has_wall_clock(info: dict) -> bool:
    def numeric(v) -> bool:
        if isinstance(v, bool):
            return False
        if isinstance(v, int | float):
            return True
        if isinstance(v, list):
            return bool(v) and all(numeric(x) for x in v)
        if isinstance(v, dict):
            return bool(v) and all(numeric(x) for x in v.values())
        return False

    def walk(d) -> bool:
        return isinstance(d, dict) and any(("seconds" in k and numeric(v)) or walk(v) for k, v in d.items())

    return walk(info)


def problems(folder: Path, seen: set[Path] | None = None) -> list[str]:
    """What the rule finds missing in ``folder`` (empty when it is complete)."""
    seen = set() if seen is None else seen
    if folder in seen:
        return []
    seen.add(folder)
    rel = folder.relative_to(ROOT)
    if not folder.is_dir():
        return [f"{rel} does not exist"]
    files = _files(_scope(folder))
    names = {f.name for f in files}
    missing = []
    readmes = [f for f in files if f.name in ("README.md", "command.txt")]
    if not any(COMMAND.search(f.read_text()) for f in readmes):
        missing.append("a command (README.md or command.txt naming `opiq-jax ...`, `python -m experiments...` or "
                       "`bash .ci/run`)")
    comparison = folder / "before_after.md"
    if comparison.exists():
        head = comparison.read_text().splitlines()[:4]
        inputs = [line.split(":", 1)[1].strip() for line in head if line.startswith(("before:", "after:"))]
        if len(inputs) != 2:
            missing.append("before_after.md naming its two input folders")
        for name in inputs:
            path = (ROOT / name).resolve()
            if RESULTS not in path.parents:
                missing.append(f"its input {name} to be a folder under docs/results")
            else:
                missing += [f"input {name}: {p}" for p in problems(path, seen)]
        return [f"{rel}: {m}" for m in missing]
    data = [f for f in files if f.name not in NOT_DATA and f.name.endswith((".json", ".csv", ".csv.gz"))]
    if not names & {"metrics.csv", "metrics.csv.gz"} and not data:
        missing.append("metrics (metrics.csv[.gz]) or a data file (.json/.csv)")
    if not names & {"config.json", "preset.json"}:
        def records_settings(f: Path) -> bool:
            if f.suffix != ".json":
                return False
            document = json.loads(f.read_text())
            return isinstance(document, dict) and bool(SETTINGS_KEYS & set(document))
        if not any(records_settings(f) for f in data):
            missing.append("a configuration (config.json, preset.json, or a data file recording its settings)")
    infos = [json.loads(f.read_text()) for f in files if f.name == "run_info.json"]
    if not any(isinstance(i, dict) and i.get("device") and _has_wall_clock(i) for i in infos):
        missing.append("run_info.json with a device and a wall-clock in seconds")
    return [f"{rel}: {m}" for m in missing]


CITED = cited_folders()


def test_the_pages_cite_results():
    assert len(CITED) >= 10, sorted(CITED)


@pytest.mark.parametrize("folder", sorted(CITED), ids=lambda p: str(p.relative_to(RESULTS)))
def test_cited_folder_is_complete(folder):
    found = problems(folder)
    assert not found, f"cited by {sorted(CITED[folder])}:\n" + "\n".join(found)


def test_readme_is_small():
    """The front door, read in five minutes: the set-up, the main job, the API, the paper's experiments, links."""
    size = (ROOT / "README.md").stat().st_size
    assert size <= 8_192, f"README.md is {size} bytes; move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_references(page):
    text = page.read_text()
    issue_numbers = re.findall(r"(?<![\w&/])#\d+\b", text)
    issue_words = re.findall(r"\bissues? \d+\b", text, flags=re.IGNORECASE)
    internal = re.findall(r"REFERENCE\.md|DESIGN\.md|\.\./shared", text)
    assert not issue_numbers and not issue_words and not internal, (issue_numbers, issue_words, internal)


def test_the_rule_catches_incomplete_folders(tmp_path, monkeypatch):
    """The rule itself: a summary-only folder fails, a complete one passes, a comparison checks its inputs."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    monkeypatch.setattr(module, "ROOT", tmp_path.parent)
    good = tmp_path / "good"
    good.mkdir()
    (good / "README.md").write_text("`opiq-jax train --env chain`\n")
    (good / "metrics.csv.gz").write_bytes(b"")
    (good / "config.json").write_text("{}")
    (good / "run_info.json").write_text(json.dumps({"device": "NVIDIA H200", "seconds": 12.5}))
    assert problems(good) == []
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text("{}")
    (bad / "run_info.json").write_text(json.dumps({"device": "NVIDIA H200"}))
    found = problems(bad)  # a summary without a configuration, no command, no wall-clock
    assert len(found) == 3 and any("configuration" in p for p in found), found
    compare = tmp_path / "compare"
    compare.mkdir()
    (compare / "README.md").write_text("python -m experiments.tools.before_after --before A --after B\n")
    (compare / "before_after.md").write_text(
        f"before: {tmp_path.name}/good\n\nafter: {tmp_path.name}/bad\n\n| table |\n")
    found = problems(compare)
    assert found and all(f"{tmp_path.name}/bad" in p for p in found)


# --------------------------------------------------------------------------------------------
# The numbers in the README's tables come from the folders that the table or its paragraph cites.
#
# A table is checked when its lines, or the paragraph just above it, link to a folder under docs/results/.
# Every number in its cells but the first column (the row's label) must appear, to the table's precision,
# in a text file (.md, .json, .csv, .txt) of a cited folder's scope (itself, below, above up to its top).
# "150k" is 150,000 in both places and "5,594" is 5594; "9.11" matches a file's 9.1104, "0.100" its 0.1.

TABLE_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?k?(?!\w)")
FILE_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?k?")
TEXT_SUFFIXES = {".md", ".json", ".csv", ".txt"}


def parse_number(token: str) -> tuple[float, int | None]:
    """(value, decimals) of a number as written; decimals is None for "k" numbers (compared exactly)."""
    token = token.strip(",").replace(",", "")
    if token.endswith("k"):
        return float(token[:-1]) * 1000, None
    decimals = len(token.split(".")[1]) if "." in token and "e" not in token.lower() else 0
    return float(token), decimals


def tables_with_paragraphs(text: str) -> list[tuple[str, list[str]]]:
    """Each markdown table of ``text`` with the paragraph above it: (paragraph, table lines)."""
    blocks = re.split(r"\n\s*\n", text)
    found = []
    for i, block in enumerate(blocks):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        if len(lines) >= 3 and re.match(r"^\|[-| :]+\|$", lines[1]):
            found.append((blocks[i - 1] if i else "", block.splitlines()))
    return found


def cited_results(text: str, page: Path) -> list[Path]:
    """The folders under docs/results that ``text`` links to (a file stands for its folder)."""
    folders = []
    for target in LINK.findall(text):
        path = (page.parent / target.split("#")[0]).resolve()
        if RESULTS in path.parents:
            folders.append(path if path.is_dir() else path.parent)
    return folders


def known_numbers(folders: list[Path]) -> tuple[set[float], dict[int, set[float]]]:
    """Every number in the cited folders' text files: exact values, and values rounded to each precision."""
    return numbers_in_files({f for folder in folders for f in _files(_scope(folder)) if f.suffix in TEXT_SUFFIXES})


def numbers_in_files(files: set[Path]) -> tuple[set[float], dict[int, set[float]]]:
    """Every number in ``files``: exact values, and values rounded to each precision."""
    exact, rounded = set(), {d: set() for d in range(7)}
    for f in files:
        for token in FILE_NUMBER.findall(f.read_text(errors="replace")):
            try:
                value, _ = parse_number(token)
            except ValueError:
                continue
            exact.add(value)
            for d in rounded:
                rounded[d].add(round(value, d))
    return exact, rounded


def unbacked_numbers(table: list[str], folders: list[Path], known=None) -> list[str]:
    """The cells' numbers (first column and header excepted) that no cited file holds (or none of ``known``)."""
    exact, rounded = known if known is not None else known_numbers(folders)
    missing = []
    for line in table[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for cell in cells[1:]:
            for token in TABLE_NUMBER.findall(cell):
                value, decimals = parse_number(token)
                ok = value in exact if decimals is None else round(value, decimals) in rounded[min(decimals, 6)]
                if not ok:
                    missing.append(f"{token!r} in row {cells[0]!r}")
    return missing


HEADLINE = ROOT / "docs" / "headline.md"  # the headline numbers the README's table of experiments points to
HEADLINE_TABLES = [(p, t) for page in (ROOT / "README.md", HEADLINE)
                   for p, t in tables_with_paragraphs(page.read_text())
                   if cited_results(p + "\n" + "\n".join(t), page)]


def test_the_headline_page_has_cited_tables():
    assert len(HEADLINE_TABLES) >= 4


@pytest.mark.parametrize("paragraph,table", HEADLINE_TABLES, ids=lambda x: x[0][:40] if isinstance(x, list) else None)
def test_headline_table_numbers_are_in_their_files(paragraph, table):
    folders = cited_results(paragraph + "\n" + "\n".join(table), HEADLINE)
    missing = unbacked_numbers(table, folders)
    assert not missing, f"not in {[str(f.relative_to(ROOT)) for f in folders]}: " + "; ".join(missing)


def test_a_changed_number_is_caught(tmp_path, monkeypatch):
    """The check itself: a table's number that its cited folder holds passes; a changed one fails."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "RESULTS", tmp_path / "docs" / "results")
    run = tmp_path / "docs" / "results" / "run"
    run.mkdir(parents=True)
    (run / "summary.md").write_text("| opiq | 9.1104 | 150k–220k | 5594.2 |\n")
    page = tmp_path / "README.md"
    good = ("Folder: [run](docs/results/run).\n\n| method | a | b | c |\n|---|---|---|---|\n"
            "| OPIQ | 9.11 | 150k | 5,594 |\n")
    (paragraph, table), = tables_with_paragraphs(good)
    assert unbacked_numbers(table, cited_results(paragraph, page)) == []
    (paragraph, table), = tables_with_paragraphs(good.replace("9.11", "9.12"))
    assert unbacked_numbers(table, cited_results(paragraph, page)) == ["'9.12' in row 'OPIQ'"]


# --------------------------------------------------------------------------------------------
# The README's table of the paper's experiments links doc pages, not results folders. Its verdicts use one
# vocabulary (reproduced / differs / inconclusive / not run), and every number in a row appears in the page that row
# links to, whose own numbers the checks above tie to their folders.

VERDICTS = ("reproduced", "differs", "inconclusive", "not run")
EXPERIMENTS_HEADER = "| the paper's experiment |"


def experiments_table(text: str) -> list[str]:
    """The lines of the table whose header starts with EXPERIMENTS_HEADER."""
    tables = [t for _, t in tables_with_paragraphs(text) if t[0].startswith(EXPERIMENTS_HEADER)]
    assert len(tables) == 1, f"expected one table headed {EXPERIMENTS_HEADER!r}, found {len(tables)}"
    return tables[0]


def experiment_row_problems(line: str, page: Path) -> list[str]:
    """What is wrong with one row: a verdict outside VERDICTS, no linked page, or a number its page lacks."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    problems = [] if cells[1].startswith(VERDICTS) else [f"verdict {cells[1][:30]!r} in row {cells[0]!r}"]
    pages = {(page.parent / t.split("#")[0]).resolve() for t in LINK.findall(line) if t.split("#")[0].endswith(".md")}
    if not pages or not all(p.is_file() for p in pages):
        return problems + [f"no linked page in row {cells[0]!r}"]
    verdict_only = "| " + " | ".join(cells[:2]) + " |"
    return problems + unbacked_numbers(["", "", verdict_only], [], known=numbers_in_files(pages))


def test_the_paper_experiments_table_says_reproduced_differs_or_not_run_and_its_pages_hold_its_numbers():
    page = ROOT / "README.md"
    table = experiments_table(page.read_text())
    assert len(table) >= 8
    problems = [p for line in table[2:] for p in experiment_row_problems(line, page)]
    assert not problems, "; ".join(problems)


def test_an_experiments_row_with_another_verdict_or_a_number_its_page_lacks_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "maze.md").write_text("OPIQ reaches the goal in 24 of 24 seeds at 100k steps.\n")
    page = tmp_path / "README.md"
    good = "| Figure 5 | differs: 24 seeds, 100k steps | [maze](docs/maze.md) |"
    assert experiment_row_problems(good, page) == []
    assert experiment_row_problems(good.replace("differs", "in part"), page) == [
        "verdict 'in part: 24 seeds, 100k steps' in row 'Figure 5'"]
    assert experiment_row_problems(good.replace("24 seeds", "25 seeds"), page) == ["'25' in row 'Figure 5'"]
    assert experiment_row_problems(good.replace("docs/maze.md", "docs/none.md"), page) == [
        "no linked page in row 'Figure 5'"]


def test_the_results_index_lists_every_folder_with_its_claim_and_pages():
    """docs/results/README.md is what the folders give now (rerun ``python -m experiments.tools.results_index``)."""
    assert INDEX.read_text(encoding="utf-8") == index_text()


def test_every_results_folder_is_cited_by_a_page():
    """A folder no page cites is superseded or withdrawn: it leaves HEAD (its commit keeps it)."""
    cited_tops = {f.relative_to(RESULTS).parts[0] for f in CITED}
    assert [f.name for f in top_folders() if f.name not in cited_tops] == []


def test_no_results_folder_holds_code():
    """Code that produced a folder lives in experiments/ or in the history (its README says ``git show REV:PATH``)."""
    code = sorted(str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*")
                  if p.suffix in (".py", ".sh", ".patch", ".ipynb") and p.is_file())
    assert code == []


SCRIPT = re.compile(r"python -m experiments\.([\w.]+\w)")


def scripts_named(text: str) -> set[str]:
    """The scripts a text runs, as paths below experiments/ (``paper/compare_methods``)."""
    return {name.replace(".", "/") for name in SCRIPT.findall(text)}


def test_every_script_a_page_runs_is_in_experiments():
    """The docs' pages name only scripts that HEAD holds (a reader can run what a page tells them to)."""
    missing = sorted(f"{page.name}: {name}" for page in PAGES for name in scripts_named(page.read_text())
                     if not (ROOT / "experiments" / f"{name}.py").exists())
    assert missing == []


def test_a_results_folder_names_where_a_script_out_of_head_is_kept():
    """A folder whose command names a script that left HEAD says how to read it: ``git show REV:experiments/X.py``."""
    missing = []
    for readme in sorted(RESULTS.rglob("README.md")):
        text = readme.read_text()
        for name in scripts_named(text):
            if not (ROOT / "experiments" / f"{name}.py").exists() and f":experiments/{name}.py" not in text:
                missing.append(f"{readme.relative_to(RESULTS)}: {name}")
    assert missing == []


# --------------------------------------------------------------------------------------------
# Where every record came from: the revision of the code that ran and whether its tree was clean, in every
# run_info.json and timeboxed.json under docs/results (added afterwards, from git history, for the folders that
# predate the rule, each saying so), and no absolute path of the machine that wrote a file.

RECORD_NAMES = ("run_info.json", "timeboxed.json")
HEX_REVISION = re.compile(r"[0-9a-f]{7,40}")
MACHINE_PATH = re.compile(r"(?<![\w.~$/-])/(root|work|tmp|home|opt|mnt|scratch|data|Users|srv)(?![\w.-])")


def records() -> list[Path]:
    return sorted(p for name in RECORD_NAMES for p in RESULTS.rglob(name))


def record_problems(record) -> list[str]:
    """What a record lacks: a revision (a commit's hash), ``tree_clean`` (true, false, or null with the
    ``provenance`` that says why it is unknown), and, from a dirty tree, what was ``uncommitted``."""
    if not isinstance(record, dict):
        return ["not a JSON object"]
    problems = []
    if not (isinstance(record.get("revision"), str) and HEX_REVISION.fullmatch(record["revision"])):
        problems.append(f"revision {record.get('revision')!r} is not a commit's hash")
    clean = record.get("tree_clean", "missing")
    if clean not in (True, False, None):
        problems.append(f"tree_clean {clean!r} is not true, false or null")
    if clean is None and not record.get("provenance"):
        problems.append("tree_clean null without a provenance saying why it is unknown")
    if clean is False and not record.get("uncommitted"):
        problems.append("tree_clean false without the uncommitted changes")
    return problems


def test_every_record_names_its_revision_and_whether_its_tree_was_clean():
    assert len(records()) >= 150
    found = {str(p.relative_to(RESULTS)): record_problems(json.loads(p.read_text(encoding="utf-8"))) for p in records()}
    assert {name: problems for name, problems in found.items() if problems} == {}


def test_every_recorded_revision_is_a_commit_of_the_history():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    revisions = {json.loads(p.read_text(encoding="utf-8"))["revision"] for p in records()}
    unknown = [r for r in sorted(revisions) if subprocess.run(["git", "cat-file", "-e", f"{r}^{{commit}}"], cwd=ROOT,
                                                               capture_output=True).returncode != 0]
    assert unknown == []


def test_a_folder_run_from_a_dirty_tree_says_so_in_its_readme():
    dirty = {p.relative_to(RESULTS).parts[0] for p in records()
             if json.loads(p.read_text(encoding="utf-8")).get("tree_clean") is False}
    assert dirty, "the committed dirty runs (montezuma-head-init, ...) are recorded as such"
    unlabelled = [top for top in sorted(dirty)
                  if not re.search(r"uncommitted tree|dirty tree", (RESULTS / top / "README.md").read_text())]
    assert unlabelled == []


def test_the_record_rule_catches_what_a_record_lacks():
    good = {"revision": "474d825", "tree_clean": False, "uncommitted": ["--head-init-scale"]}
    assert record_problems(good) == []
    assert record_problems({"revision": "474d825", "tree_clean": None, "provenance": "from git history"}) == []
    assert record_problems({"device": "H200"}) == ["revision None is not a commit's hash",
                                                   "tree_clean 'missing' is not true, false or null"]
    assert record_problems({**good, "uncommitted": []}) == ["tree_clean false without the uncommitted changes"]
    assert record_problems({**good, "tree_clean": None, "revision": "474d825 plus"}) == [
        "revision '474d825 plus' is not a commit's hash",
        "tree_clean null without a provenance saying why it is unknown"]


def text_of(path: Path) -> str:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return raw.decode("utf-8", errors="replace")


def test_no_results_file_holds_an_absolute_path_of_the_machine_that_wrote_it():
    files = [p for p in RESULTS.rglob("*") if p.is_file() and p.suffix not in (".png", ".npz", ".msgpack")]
    found = sorted(f"{p.relative_to(RESULTS)}: {m.group(0)}"
                   for p in files for m in [MACHINE_PATH.search(text_of(p))] if m)
    assert found == []


@pytest.mark.parametrize("text, caught", [
    ('"--out", "/root/out/bench32"', True), ("--out /tmp/mz", True), ("/work/main/experiments/x.py", True),
    ("/home/user/run", True), ('"/opt/torch/.venv/bin/python"', True),
    ("docs/results/x", False), ("~/out/bench32", False), ("$TMPDIR/mz", False), ("/usr/bin/time -v", False),
    ("1/tmp", False), ("a/root/b", False),
])
def test_the_path_rule_catches_machine_paths_only(text, caught):
    assert bool(MACHINE_PATH.search(text)) == caught


# The writers: what a new record says about its code, and how a command is written without the machine's paths.

def git_repository(folder: Path) -> Path:
    def git(*args):
        subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)
    folder.mkdir()
    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    (folder / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("commit", "-q", "-m", "code")
    return folder


def test_source_revision_names_the_commit_the_changed_tracked_files_and_new_code(tmp_path):
    repo = git_repository(tmp_path / "repo")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (repo / "results").mkdir()
    (repo / "results" / "run_info.json").write_text("{}")  # untracked: a results folder inside the checkout
    assert source_revision(repo) == {"revision": head, "tree_clean": True}
    (repo / "code.py").write_text("x = 2\n")
    assert source_revision(repo) == {"revision": head, "tree_clean": False, "uncommitted": ["code.py"]}
    (repo / "code.py").write_text("x = 1\n")
    (repo / "study, ✓").mkdir()
    (repo / "study, ✓" / "new.py").write_text("y = 1\n")  # a module not yet added runs as much as changed code
    asked_inside = source_revision(repo / "study, ✓")  # the package's folder asks, not the repository's top
    assert asked_inside == {"revision": head, "tree_clean": False, "uncommitted": ["study, ✓/new.py"]}
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "mv", "code.py", "code \"renamed\".py"], cwd=repo, check=True)
    assert source_revision(repo)["uncommitted"] == ["code \"renamed\".py", "results/run_info.json",
                                                    "study, ✓/new.py"]  # added: tracked now, a results file too
    outside = tmp_path / "installed"
    outside.mkdir()
    assert source_revision(outside) == {"revision": None, "tree_clean": None,
                                        "revision_note": "not run from a git checkout"}


def test_portable_writes_paths_relative_to_the_working_directory_or_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert portable(str(tmp_path / "out" / "cell")) == "out/cell"
    assert portable(f"--out={tmp_path / 'out'}") == "--out=out"
    assert portable("/elsewhere/scratch/cell") == "cell"
    assert portable("--out=/elsewhere/cell") == "--out=cell"
    assert [portable(a) for a in ("--seeds", "4", "results/x", "--lr=0.0005")] == ["--seeds", "4", "results/x",
                                                                                   "--lr=0.0005"]


def test_a_resumed_folder_keeps_the_revisions_that_trained_it_before():
    assert earlier_revisions_of({}, "b") == []
    assert earlier_revisions_of({"revision": "a"}, "a") == []
    assert earlier_revisions_of({"revision": "a"}, "b") == ["a"]
    assert earlier_revisions_of({"revision": "b", "earlier_revisions": ["a"]}, "c") == ["a", "b"]
    assert earlier_revisions_of({"revision": "a", "earlier_revisions": ["a", "b"]}, "b") == ["a"]


def test_a_trained_folder_records_its_revision_and_no_machine_path(tmp_path):
    import opiq_jax

    out = tmp_path / "chain"
    opiq_jax.train(env="chain", methods=["dqn"], seeds=1, steps=200, chain_length=5, log_every=100, out=str(out))
    info = json.loads((out / "run_info.json").read_text())
    assert info["revision"] == source_revision()["revision"] and info["tree_clean"] in (True, False, None)
    assert str(tmp_path) not in (out / "run_info.json").read_text()
