"""The mutation harness (``experiments/tools/mutation_testing.py``): a random sample of cheap mutants is killed in a copy of
the project, a mutant whose snippet is gone is reported stale, and pytest's output is read right."""

from __future__ import annotations

import random

import pytest

from experiments.tools.mutants import CHEAP, MUTANTS, Mutant
from experiments.tools.mutation_testing import (
    classify,
    first_failure,
    markdown,
    mutate,
    run_mutant,
    run_mutants,
    select,
)


def test_a_random_sample_of_cheap_mutants_is_killed_in_a_copy_of_the_project():
    seed = random.randrange(1 << 30)
    chosen = select([m for m in MUTANTS if m.id in CHEAP], sample=2, seed=seed)
    outcomes = run_mutants(chosen, jobs=1, timeout=120)
    assert [o.status for o in outcomes] == ["killed", "killed"], (seed, outcomes)
    for outcome in outcomes:
        assert outcome.killer in outcome.mutant.tests  # a test of the mutant's own list failed


def test_a_mutant_whose_snippet_is_gone_or_repeated_is_reported_stale():
    gone = Mutant("gone", "opiq_jax/pieces/counts.py", "return jnp.median(sketch)", "x", "not in the file", ("tests/test_counts.py",))
    twice = Mutant("twice", "opiq_jax/pieces/counts.py", "import", "x", "many times in the file", ("tests/test_counts.py",))
    missing = Mutant("missing", "opiq_jax/no_such_module.py", "a", "b", "no such file", ("tests/test_counts.py",))
    outcomes = {o.mutant.id: o for o in (run_mutant(m) for m in (gone, twice, missing))}
    assert {k: o.status for k, o in outcomes.items()} == {"gone": "stale", "twice": "stale", "missing": "stale"}
    assert "occurs 0 times" in outcomes["gone"].killer and "does not exist" in outcomes["missing"].killer


def test_every_declared_mutant_still_applies_and_names_its_tests():
    from experiments.tools.mutation_testing import ROOT

    assert len(MUTANTS) >= 60 and len({m.id for m in MUTANTS}) == len(MUTANTS)
    assert set(CHEAP) <= {m.id for m in MUTANTS}
    for mutant in MUTANTS:
        mutated = mutate((ROOT / mutant.file).read_text(), mutant)
        assert mutated != (ROOT / mutant.file).read_text()
        assert mutant.tests and all("::" in t and (ROOT / t.split("::")[0]).is_file() for t in mutant.tests), mutant.id


def test_pytests_output_is_read_for_the_first_failing_test():
    output = ("F\n=== short test summary info ===\n"
              "FAILED tests/test_a.py::test_one[chain] - AssertionError: assert 2 == 1\n"
              "FAILED tests/test_a.py::test_two\n!!! stopping after 1 failures !!!\n1 failed in 3.2s\n")
    assert first_failure(output) == "tests/test_a.py::test_one[chain]"
    assert classify(1, output) == ("killed", "tests/test_a.py::test_one[chain]")
    assert classify(2, "ERROR tests/test_b.py - ImportError: x\n1 error in 1s") == ("killed", "tests/test_b.py")
    assert classify(0, "3 passed in 1s") == ("survived", "")
    assert classify(None, "") == ("timeout", "")
    assert classify(4, "ERROR: file or directory not found: tests/nope.py\n")[0] == "error"
    assert classify(5, "no tests ran in 0.1s")[0] == "error"


def test_selection_and_report():
    assert [m.id for m in select(MUTANTS, only=["counts-query-max"])] == ["counts-query-max"]
    assert len(select(MUTANTS, sample=3, seed=1)) == 3
    assert select(MUTANTS, sample=3, seed=1) == select(MUTANTS, sample=3, seed=1)
    with pytest.raises(ValueError, match="unknown mutant"):
        select(MUTANTS, only=["no-such-mutant"])
    from experiments.tools.mutation_testing import Outcome

    text = markdown([Outcome(MUTANTS[0], "killed", "tests/test_x.py::test_y", 12.0), Outcome(MUTANTS[1], "survived")],
                    "abc1234", "2026-01-01 00:00", 90.0, 1)
    assert "revision `abc1234`" in text and "2 mutants, 1 killed, 1 survived" in text and "1.5 min" in text
    assert f"| `{MUTANTS[0].id}` | `{MUTANTS[0].file}` |" in text and "`tests/test_x.py::test_y`" in text
