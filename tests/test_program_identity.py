"""experiments/tools/program_identity.py: lowered programs of two revisions, hashed and compared."""

import importlib.util

import pytest
import tyro

from experiments.tools.program_identity import ROOT, Args, compare, main, program_hashes, row_text


def test_rows_say_which_programs_are_the_same_changed_or_absent():
    rows = compare({"chain float32 plain": "a" * 64, "chain float32 rnd": "b" * 64, "chain float32 dora": "c" * 64},
                   {"chain float32 plain": "a" * 64, "chain float32 rnd": "d" * 64, "chain float32 bsp": "e" * 64})
    assert [(r["program"], r["same"]) for r in rows] == [
        ("chain float32 plain", True), ("chain float32 rnd", False), ("chain float32 dora", False),
        ("chain float32 bsp", False)]
    assert rows[2]["after"] == "absent" and rows[3]["before"] == "absent" and rows[0]["before"] == "a" * 12


def test_a_revision_lowers_to_the_same_programs_in_two_worktrees(tmp_path):
    """Two worktrees of one revision, in processes of their own: every program the same, Montezuma's too (where
    EnvPool is installed), although a pool's emulators are named by their addresses in the lowered text, which
    differ from process to process; the comparison sees through them."""
    envs = ["chain", "montezuma"] if importlib.util.find_spec("envpool") else ["chain"]
    status = main(["--against", "HEAD", "--after", "HEAD", "--envs", *envs, "--precisions", "float32",
                   "--methods", "opiq", "bsp", "--out", str(tmp_path)])
    table = (tmp_path / "program_identity.md").read_text()
    assert "| chain float32 plain |" in table and "| chain float32 bsp |" in table
    programs = 2 * len(envs)
    assert status == 0 and f"{programs} of {programs} programs the same." in table, table
    if "montezuma" in envs:
        assert "| montezuma float32 plain |" in table and "| montezuma float32 bsp |" in table


def test_a_revision_that_is_not_there_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="cannot check out 'no-such-revision'"):
        main(["--against", "no-such-revision", "--envs", "chain", "--precisions", "float32", "--out", str(tmp_path)])


def test_compiled_programs_are_counted_by_opcode_where_asked():
    """``--compiled-ops``: a revision also compiles its programs and counts their instructions by opcode (how a
    change that only reorders the state's leaves shows the same computation). This tree's chain program, in a
    process of its own as a revision's is: counts of a program that has instructions, and a loop among them."""
    args = tyro.cli(Args, args=["--envs", "chain", "--precisions", "float32", "--methods", "opiq", "--compiled-ops"])
    found = program_hashes(ROOT, args)
    [(name, counts)] = found["ops"].items()
    assert name == "chain float32 plain" and set(found["hashes"]) == {name}
    assert sum(counts.values()) > 100 and counts.get("while", 0) >= 1, counts


def test_rows_say_whether_the_compiled_programs_have_the_same_opcode_counts():
    ops = {"a": {"add": 2, "while": 1}, "b": {"add": 1}}
    rows = compare({"a": "1" * 64, "b": "2" * 64}, {"a": "3" * 64, "b": "2" * 64},
                   ops, {"a": {"while": 1, "add": 2}, "b": {"add": 2}})
    assert [(r["same"], r["same_ops"], r["instructions"]) for r in rows] == [(False, True, [3, 3]),
                                                                             (True, False, [1, 2])]
    assert row_text(rows[0]).endswith("| **no** | yes (3 → 3) |")
    assert "same_ops" not in compare({"a": "1"}, {"a": "1"})[0]  # counted only where asked
