"""The scripts behind the figures and tables of docs/, one module per experiment, in four folders:

* ``paper/``: the paper's figures, tables and tabular theory (``python -m experiments.paper.compare_methods``);
* ``studies/``: studies beyond the paper (DeepSea, other Atari games, SimHash aliasing, Montezuma's learner);
* ``bench/``: speed and size (the throughput table, Montezuma's rates, the checkpoint writer, the authors' code);
* ``tools/``: checks of the project itself (mutation testing, program identity, the behaviour check, the results
  index, before/after comparisons, the time-boxed run for a lease).

Run one from the repository root as ``python -m experiments.FOLDER.NAME --help``, or by its path from anywhere,
``python /path/to/repo/experiments/FOLDER/NAME.py --help``: a script run by path puts the repository root on
``sys.path`` first (``if not __package__: ...`` at its top), so its ``experiments.*`` imports resolve as under
``python -m``. One-off investigations whose answers are in docs/ leave HEAD; their results folders say how to read
them from the history (``git show REV:experiments/NAME.py``).
"""
