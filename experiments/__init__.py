"""The scripts behind the figures and tables of docs/: one module per experiment.

Run one from the repository root as ``python -m experiments.NAME --help``, or by its path from anywhere,
``python /path/to/repo/experiments/NAME.py --help``: a script run by path puts the repository root on
``sys.path`` first (``if not __package__: ...`` at its top), so its ``experiments.*`` imports resolve as under
``python -m``. The training scripts go through the public API (``opiq_jax.train``, ``opiq_jax.load``).
"""
