"""The index of ``docs/results/``: every results folder, the claim it backs and the pages that cite it.

A folder's claim is the title of its ``README.md`` (its first ``# `` line); its pages are the README and the pages
of ``docs/`` whose links or literal ``docs/results/...`` paths reach it or a folder inside it (the rule of
``tests/test_provenance.py``, which checks that the index written here is the one these folders give).

Run: ``python -m experiments.tools.results_index`` (rewrites ``docs/results/README.md``).

Uses no part of the package.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
INDEX = RESULTS / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")
LITERAL = re.compile(r"docs/results/[\w.\-/]+")


def pages() -> list[Path]:
    """The pages whose citations count: the README and ``docs/*.md`` (not the results folders' own READMEs)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def cited_folders() -> dict[Path, set[str]]:
    """Every cited folder under ``docs/results``, with the names of the pages that cite it."""
    cited: dict[Path, set[str]] = {}
    for page in pages():
        text = page.read_text(encoding="utf-8")
        targets = [(page.parent / t.split("#")[0]) for t in LINK.findall(text) if not t.startswith(("http", "#"))]
        targets += [ROOT / t.rstrip(".,;:") for t in LITERAL.findall(text)]
        for target in targets:
            path = target.resolve()
            if path == RESULTS or RESULTS not in path.parents:
                continue
            folder = path if path.is_dir() or not path.suffix else path.parent
            if folder != RESULTS:  # the index itself
                cited.setdefault(folder, set()).add(page.name)
    return cited


def top_folders() -> list[Path]:
    return sorted(p for p in RESULTS.iterdir() if p.is_dir())


def claim(folder: Path) -> str:
    """The title of the folder's README.md, or of the first one below it."""
    readmes = [folder / "README.md", *sorted(folder.rglob("README.md"))]
    for readme in readmes:
        if readme.exists():
            for line in readme.read_text(encoding="utf-8").splitlines():
                if line.startswith("# "):
                    return line[2:].strip().replace("|", "\\|")
    return "(no README)"


def citing_pages() -> dict[str, list[str]]:
    """Per top-level folder, the pages that cite it or anything inside it."""
    found: dict[str, set[str]] = {}
    for folder, names in cited_folders().items():
        found.setdefault(folder.relative_to(RESULTS).parts[0], set()).update(names)
    return {name: sorted(names, key=lambda n: (n != "README.md", n)) for name, names in found.items()}


def page_link(name: str) -> str:
    return "[README](../../README.md)" if name == "README.md" else f"[{name}](../{name})"


def index_text() -> str:
    cited = citing_pages()
    lines = ["# The results archive: every folder, its claim and the pages that cite it", "",
             "Each folder holds the command that made it, its configuration, its metrics or data and its "
             "`run_info.json` (device, wall-clock, the code's revision and whether its tree was clean); "
             "`tests/test_provenance.py` checks every cited folder for them, every record for its revision, every "
             "file for the machine's absolute paths, and this index against the folders. Written by "
             "`python -m experiments.tools.results_index`.", "",
             "| folder | claim (its README's title) | cited by |", "|---|---|---|"]
    for folder in top_folders():
        pages_of = ", ".join(page_link(p) for p in cited.get(folder.name, [])) or "none"
        lines.append(f"| [{folder.name}]({folder.name}/) | {claim(folder)} | {pages_of} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    INDEX.write_text(index_text(), encoding="utf-8")
    print(f"wrote {INDEX.relative_to(ROOT)}: {len(top_folders())} folders")


if __name__ == "__main__":
    main()
