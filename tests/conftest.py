"""Test-session settings: a compilation cache shared by the tests and their subprocesses.

Many tests compile the same small programs, and several start Python processes that compile them again
(resume after a kill, sharding, several hosts, fault injection). JAX's persistent cache lets every later
compilation of a program load the first one's executable; it is keyed by the program itself, so a
changed program is compiled afresh. The folder is ignored by git.
"""

import os
from pathlib import Path

os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".jax_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# The tests' programs are small and compile far longer than they run: LLVM's cheapest optimisation level makes a
# cold run of the suite about a third faster on the CPU (the results stay deterministic, run for run; they are
# compared with each other or with hand-computed values, never with numbers compiled at another level).
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
