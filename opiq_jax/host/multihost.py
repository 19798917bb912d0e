"""Several processes (one per host) joined by ``jax.distributed``: who failed, and an orderly end.

The processes never exchange data: each trains its own share of the runs into its own folder. What they
share is the coordination service that ``jax.distributed.initialize`` starts, and two things can go
wrong with it:

* the processes end at different times. jax's exit hook shuts the client down behind a barrier with a
  timeout (5 minutes by default); a process that finishes longer than that before another makes both
  abort. So every process announces it is done (a key in the service's key-value store) and waits, in
  short retries that print nothing, until every other process is done or failed, then shuts down; the
  order of shutdowns then does not matter and nothing is printed;
* a process fails. It writes why under a failure key before it ends; the others read the failure keys
  between chunks and stop with one line, their checkpoints written (:class:`PeerFailed`).

A process killed outright (SIGKILL) writes no key: jax's heartbeat then ends the others (after 100 s by
default), and each resumes from its checkpoint when the job is started again.
"""

from __future__ import annotations

import jax
from jax.errors import JaxRuntimeError

from ..common.errors import PeerFailed, UsageError

DONE, FAILED = "opiq_jax/done/", "opiq_jax/failed/"


def join_hosts(coordinator: str | None, num_processes: str | int | None, process_id: str | int | None
               ) -> tuple[int, int]:
    """``jax.distributed.initialize`` from the command line's options (or the cluster it detects: SLURM, Open MPI,
    Cloud TPU): this process's index and the number of processes. Call before anything starts JAX's backend."""
    given = [num_processes is not None, process_id is not None]
    if not (all(given) or (not any(given) and coordinator is None)):
        raise UsageError("--coordinator, --num-processes and --process-id go together (or none of them, where the "
                         "cluster is detected)")
    try:
        count = None if num_processes is None else int(num_processes)
        index = None if process_id is None else int(process_id)
    except ValueError:
        raise UsageError(f"--num-processes and --process-id take whole numbers, got {num_processes!r} and "
                         f"{process_id!r}") from None
    try:
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=count, process_id=index)
    except (ValueError, RuntimeError) as e:
        raise UsageError(f"--distributed: {str(e).splitlines()[0]}") from None
    return jax.process_index(), jax.process_count()


def _client():
    from jax._src import distributed  # the coordination service's client: no public name for it yet

    return distributed.global_state.client


def failure_of_others() -> str | None:
    """Why another process failed (its one line), or None while none has."""
    me = jax.process_index()
    for key, message in _client().key_value_dir_get(FAILED):
        if int(key.rsplit("/", 1)[1]) != me:
            return f"process {key.rsplit('/', 1)[1]} failed ({message}); process {me} stops too, its checkpoint kept"
    return None


def report_failure(message: str) -> None:
    """Tells the other processes that this one failed, and why (one line)."""
    _client().key_value_set(f"{FAILED}{jax.process_index()}", message.splitlines()[0][:500], allow_overwrite=True)


def finish(wait_ms: int = 60_000) -> None:
    """Announces that this process is done (failed or not: call it in a ``finally``), waits for every other
    process to say so, then shuts the coordination service down: an orderly end whatever the gaps between
    the processes' ends."""
    client, me = _client(), jax.process_index()
    client.key_value_set(f"{DONE}{me}", "1", allow_overwrite=True)
    for other in range(jax.process_count()):
        while other != me:
            try:
                client.blocking_key_value_get(f"{DONE}{other}", wait_ms)
                break
            except JaxRuntimeError as e:  # a timed-out wait is retried (heartbeats go on); it prints nothing
                if "DEADLINE_EXCEEDED" not in str(e):
                    raise
    jax.distributed.shutdown()


__all__ = ["PeerFailed", "failure_of_others", "finish", "join_hosts", "report_failure"]
