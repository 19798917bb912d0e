"""A part that counts, in a state of its own, the run's environment steps and the Q-network's updates: the schedule
tests (``tests/test_schedules.py``, ``tests/test_trainer.py``) check the trainer's schedules against it."""

import jax.numpy as jnp

from opiq_jax.parts import Part


class Tally(Part):
    """Counts the run's environment steps (``after_step``: ``envs_per_run`` per vectorised step) and the updates
    (``update`` runs once per update)."""

    name = "test_tally"

    def init(self, agent, run_key, example):
        return {"steps": jnp.int32(0), "updates": jnp.int32(0)}

    def after_step(self, agent, run, step):
        state = run.parts[self.name]
        return {**state, "steps": state["steps"] + agent.envs_per_run}

    def update(self, agent, run, batch, key):
        state = run.parts[self.name]
        return {**state, "updates": state["updates"] + 1}
