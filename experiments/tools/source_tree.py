"""A source tree of the project (a worktree, a copy) made importable from its own folder, as its wheel installs it.

The environments' sources are the top-level ``envs/`` folder, which pyproject.toml maps to ``opiq_jax.envs``. An
install does that mapping; a tree that a tool runs from its folder alone (``PYTHONPATH=TREE``), to compare it with
another, needs ``opiq_jax/envs`` itself. Revisions before the mapping hold it as a link in git; later ones get a link
of their own here, inside the scratch tree, never in the working tree (whose editable install maps it already).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def importable(tree: Path) -> Path:
    """``tree``, with ``opiq_jax/envs`` linked to its ``envs/`` where it has neither; returns ``tree``."""
    tree = Path(tree)
    inside = tree / "opiq_jax" / "envs"
    if tree.resolve() == ROOT or inside.exists() or inside.is_symlink() or not (tree / "envs").is_dir():
        return tree
    inside.symlink_to(Path("..") / "envs", target_is_directory=True)
    return tree
