"""``python -m experiments.tools.mutation_testing``, the mutation harness, as its command: a random cheap mutant is
killed in a copy of the project; mutants that are stale, name no test, break an import, change nothing or run too
long are each reported as such in its table, and fail the run; every declared mutant still applies."""

from __future__ import annotations

import dataclasses
import random

import pytest

from experiments.tools import mutation_testing
from experiments.tools.mutants import CHEAP, MUTANTS

COUNTS = "opiq_jax/primitives/counts.py"
DOC = '"""The SimHash projection ``A``: ``num_bits x obs_dim`` with i.i.d. N(0, 1) entries."""'
FAST_TEST = ("tests/test_counts.py::test_update_respects_valid_flag_and_action",)


def mutant(name: str, original: str, replacement: str = "x", file: str = COUNTS, tests=FAST_TEST):
    """A mutant of this test's own, shaped as the registry's are."""
    return dataclasses.replace(MUTANTS[0], id=name, file=file, original=original, replacement=replacement,
                               description=f"{name} (a test's own)", tests=tests)


def table_rows(path) -> dict[str, list[str]]:
    """The report's rows by mutant id: [where, description, result, killing test, s]."""
    rows = [line.split(" | ") for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    return {row[0].strip("| `"): row[1:] for row in rows}


def test_a_random_cheap_mutant_is_killed_by_its_own_tests_and_reported(tmp_path):
    seed = random.randrange(1 << 30)
    out = tmp_path / "mutation, \"cheap\" ✓.md"  # a comma, a quote and unicode in the report's name
    (outcome,) = mutation_testing.main(["--cheap", "--sample", "1", "--seed", str(seed), "--timeout", "120",
                                        "--out", str(out)])
    assert outcome.status == "killed" and outcome.mutant.id in CHEAP, (seed, outcome)
    assert outcome.killer.split("[")[0] in {t.split("[")[0] for t in outcome.mutant.tests}  # one of its own tests
    text = out.read_text(encoding="utf-8")
    assert "1 mutants, 1 killed; wall-clock" in text and "on revision `" in text
    assert table_rows(out)[outcome.mutant.id][2] == "killed"


def test_every_other_outcome_is_reported_and_fails_the_run(tmp_path, monkeypatch, capsys):
    made = [mutant("gone", "return jnp.median(sketch)"), mutant("twice", "import"),
            mutant("missing", "a", file="opiq_jax/no_such_module.py"),
            mutant("no-such-test", DOC, tests=("tests/nope.py::test_x",)),
            mutant("import-broken", DOC, "def ("), mutant("harmless", DOC, '"""A docstring a mutant rewrote."""')]
    monkeypatch.setattr(mutation_testing, "MUTANTS", made)
    out = tmp_path / "report.md"
    with pytest.raises(SystemExit) as exit_:
        mutation_testing.main(["--only", *(m.id for m in made), "--jobs", "2", "--timeout", "120", "--out", str(out)])
    assert exit_.value.code == 1  # not every mutant was killed
    assert "6 mutants, 1 killed, 1 survived, 3 stale, 1 error;" in out.read_text(encoding="utf-8")
    rows = table_rows(out)
    assert {k: row[2] for k, row in rows.items()} == {"gone": "stale", "twice": "stale", "missing": "stale",
                                                      "no-such-test": "error", "import-broken": "killed",
                                                      "harmless": "survived"}
    assert "occurs 0 times" in rows["gone"][3] and "occurs" in rows["twice"][3]
    assert "does not exist" in rows["missing"][3] and "pytest exit 4" in rows["no-such-test"][3]
    assert rows["import-broken"][3] == "`tests/test_counts.py`"  # collection failed: the module's tests kill it
    capsys.readouterr()

    # the listing says which still apply; an unknown name is a usage error; a mutant that outlives --timeout
    mutation_testing.main(["--list"])
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert [k for k, line in listed.items() if "STALE (" in line] == ["gone", "twice", "missing"]
    with pytest.raises(SystemExit):
        mutation_testing.main(["--only", "no-such-mutant"])
    assert "unknown mutant(s) no-such-mutant" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mutation_testing.main(["--only", "harmless", "--timeout", "0.01", "--out", str(out)])
    assert table_rows(out)["harmless"][2] == "timeout"


def test_every_declared_mutant_still_applies_and_names_its_tests(capsys):
    assert len(MUTANTS) >= 60 and len({m.id for m in MUTANTS}) == len(MUTANTS)
    assert set(CHEAP) <= {m.id for m in MUTANTS}
    for m in MUTANTS:
        assert m.tests and all("::" in t and (mutation_testing.ROOT / t.split("::")[0]).is_file()
                               for t in m.tests), m.id
    mutation_testing.main(["--list"])
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(MUTANTS) and all(line.rstrip().endswith("applies") for line in listed), [
        line for line in listed if not line.rstrip().endswith("applies")]
