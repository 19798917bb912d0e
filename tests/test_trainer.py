"""The compiled trainer: learning on a short chain, per-run randomness, the n-step Q+ target with
counts read at training time, and method equivalences. One compiled program serves the module."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.common.config import stack_hparams
from opiq_jax.primitives import counts
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.registry.methods import program_parts
from tests.tally import Tally
from opiq_jax.agent.bootstrap_values import uses_target_table
from opiq_jax.agent.trainer import make_stepping, make_train
from opiq_jax.agent.weights import master_params
from opiq_jax.contracts.compact import Transition
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import Experiment, RunSpec, run_keys_for
from tests.training import compiled_targets, train_chunks

CHAIN = 20  # horizon 29: a random walk almost never reaches the right end
SEEDS = 12
STATIC = static_for_env("chain", chain_length=CHAIN, total_steps=2000, log_every=1000, buffer_size=2000,
                        hidden=(64, 64), parts=program_parts(["opiq"]))


def build_runs():
    runs = [RunSpec("opiq", "paper", s, method_hparams("chain", "opiq")) for s in range(SEEDS)]
    runs += [RunSpec("dqn", "paper", s, method_hparams("chain", "dqn")) for s in range(SEEDS)]
    # OPIQ with both optimism scales at zero must be DQN + PC exactly (same seeds 0 and 1).
    runs += [RunSpec("opiq_c0", "c=0", s, method_hparams("chain", "opiq", c_action=0.0, c_bootstrap=0.0, m=2.0))
             for s in range(2)]
    runs += [RunSpec("dqn_pc", "paper", s, method_hparams("chain", "dqn_pc")) for s in range(2)]
    return tuple(runs)


@pytest.fixture(scope="module")
def trained():
    experiment = Experiment(STATIC, build_runs())
    initial, final, history = train_chunks(experiment)
    return experiment, compiled_trainer(STATIC)[0], initial, final, history


def indices(experiment, method):
    return [i for i, r in enumerate(experiment.runs) if r.method == method]


def test_opiq_reaches_the_end_of_a_short_chain_that_dqn_does_not(trained):
    experiment, _, _, _, history = trained
    visited = history[-1]["states_visited"]
    opiq = visited[indices(experiment, "opiq")] == CHAIN
    dqn = visited[indices(experiment, "dqn")] == CHAIN
    assert opiq.sum() >= 10, f"OPIQ reached the right end in only {opiq.sum()} of {SEEDS} seeds"
    assert dqn.sum() <= 3, f"epsilon-greedy DQN reached the right end in {dqn.sum()} of {SEEDS} seeds"
    # reaching the end shows in the returns too: the best possible episode return is 11
    assert np.nanmedian(history[-1]["max_return"][indices(experiment, "opiq")]) == pytest.approx(11.0)


def test_vmapped_runs_get_their_own_randomness(trained):
    experiment, _, initial, _, _ = trained
    runs = initial.runs
    first = indices(experiment, "opiq")[:3]
    flips = runs.env.params.flips[first]
    matrices = runs.counts.features.hash_matrix[first]
    kernels = master_params(experiment.static, runs)["params"]["Dense_0"]["kernel"][first]
    for a in range(3):
        for b in range(a + 1, 3):
            assert not np.array_equal(flips[a], flips[b])
            assert not np.allclose(matrices[a], matrices[b])
            assert not np.allclose(kernels[a], kernels[b])
    keys = np.asarray(jax.random.key_data(runs.key))[first]
    assert len({tuple(np.asarray(k).ravel()) for k in keys}) == 3


def test_same_seed_shares_randomness_across_methods(trained):
    experiment, _, initial, _, _ = trained
    opiq0 = indices(experiment, "opiq")[0]
    dqn0 = indices(experiment, "dqn")[0]
    np.testing.assert_array_equal(initial.runs.env.params.flips[opiq0], initial.runs.env.params.flips[dqn0])
    matrices = initial.runs.counts.features.hash_matrix
    np.testing.assert_array_equal(matrices[opiq0], matrices[dqn0])


def test_opiq_without_optimism_is_bit_identical_to_dqn_pc(trained):
    experiment, _, _, final, history = trained
    online = master_params(experiment.static, final.runs)
    for a, b in zip(indices(experiment, "opiq_c0"), indices(experiment, "dqn_pc")):
        for leaf_a, leaf_b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[a], online)),
                                  jax.tree.leaves(jax.tree.map(lambda x: x[b], online))):
            np.testing.assert_array_equal(leaf_a, leaf_b)
        for metrics in history:
            for name in ("train_return", "test_return", "states_visited", "loss"):
                np.testing.assert_array_equal(metrics[name][a], metrics[name][b])


def test_shared_action_mask_option():
    static = static_for_env("chain", chain_length=8, total_steps=100, log_every=100, buffer_size=200,
                            hidden=(8,), shared_action_mask=True, parts=program_parts(["dqn"]))
    runs = tuple(RunSpec("dqn", "paper", s, method_hparams("chain", "dqn")) for s in range(3))
    experiment = Experiment(static, runs)
    trainer, init, _ = compiled_trainer(static)
    state = init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))
    flips = np.asarray(state.runs.env.params.flips)
    assert np.array_equal(flips[0], flips[1]) and np.array_equal(flips[1], flips[2])
    matrices = state.runs.counts.features.hash_matrix
    assert not np.allclose(matrices[0], matrices[1])


def test_head_init_scale_reaches_the_initial_networks():
    """``--head-init-scale``: the online and target networks start with the output weights scaled, nothing else."""
    def initial(**option):
        static = static_for_env("chain", chain_length=8, total_steps=100, log_every=100, buffer_size=200,
                                hidden=(8,), parts=program_parts(["dqn"]), **option)
        experiment = Experiment(static, (RunSpec("dqn", "paper", 0, method_hparams("chain", "dqn")),))
        runs = compiled_trainer(static)[1](*run_keys_for(experiment), stack_hparams(experiment.hparams())).runs
        return master_params(static, runs), runs.target_params  # the online and the target network

    for plain, scaled in zip(initial(), initial(head_init_scale=0.25)):
        a, b = plain["params"], scaled["params"]
        np.testing.assert_allclose(b["head"]["kernel"], 0.25 * a["head"]["kernel"], rtol=1e-6)
        np.testing.assert_array_equal(b["Dense_0"]["kernel"], a["Dense_0"]["kernel"])
        np.testing.assert_array_equal(b["head"]["bias"], a["head"]["bias"])


def test_n_step_q_plus_target_by_hand():
    """A 3-step window through the trainer's own target function, with counts read from the sketch
    at training time, against the formula worked out by hand."""
    static = static_for_env("chain", chain_length=6, total_steps=100, log_every=100, buffer_size=100,
                            hidden=(8,), n_step=3, count_features="exact", parts=program_parts(["opiq"]))
    trainer, init, _ = compiled_trainer(static)
    runs = (RunSpec("opiq", "x", 0, method_hparams("chain", "opiq", m=2.0, c_bootstrap=3.0, beta=0.5)),)
    experiment = Experiment(static, runs)
    state = init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))
    run = jax.tree.map(lambda x: x[0], state.runs)
    # counts: N(1, .) = (5, 4), N(2, .) = (2, 1), N(3, left) = 9 ; N(4, .) = (0, 3). The bootstrap's winning action
    # (left, unvisited in 4) is visited in every other state of the window, so reading the counts of any state but
    # the bootstrap state's (the first next state 2, say) gives another target.
    count_columns, update = jax.jit(trainer.agent.count_columns), jax.jit(counts.update)  # not op by op
    for cell, action, times in [(1, 0, 5), (1, 1, 4), (2, 0, 2), (2, 1, 1), (3, 0, 9), (4, 1, 3)]:
        cols = count_columns(run, jnp.array([cell], jnp.int32))
        for _ in range(times):
            run = run.replace(counts=run.counts.replace(sketch=update(run.counts.sketch, cols, action)))
    window = Transition(
        compact=jnp.array([[[1], [2], [3]]], jnp.int32), action=jnp.array([[1, 1, 0]], jnp.int32),
        reward=jnp.array([[0.0, 1.0, 2.0]]), terminated=jnp.zeros((1, 3), bool), done=jnp.zeros((1, 3), bool),
        next_compact=jnp.array([[[2], [3], [4]]], jnp.int32),
    )
    targets = compiled_targets(trainer)
    target, _ = targets(run, window, jnp.ones((1, 3), bool))
    assert target.shape == (1, 1)  # [batch, heads]
    env = trainer.stepping.env
    q_next = jax.jit(trainer.network.apply)(run.target_params,
                                            env.obs_from_compact(jnp.array([4]), run.env.params)[None])[0]
    g = 0.99
    rewards = [0.0 + 0.5 / 2, 1.0 + 0.5 / 1, 2.0 + 0.5 / 3]
    boot = max(float(q_next[0]) + 3.0 / 1**2, float(q_next[1]) + 3.0 / 4**2)
    expected = rewards[0] + g * rewards[1] + g**2 * rewards[2] + g**3 * boot
    assert float(target[0, 0]) == pytest.approx(expected, rel=1e-5)
    assert float(q_next[0]) + 3.0 > float(q_next[1]) + 3.0 / 16  # left wins: its count matters, and differs above
    # the same window cut by a terminal on its second step: no bootstrap, third step ignored
    window = window.replace(terminated=jnp.array([[False, True, False]]), done=jnp.array([[False, True, False]]))
    target, _ = targets(run, window, jnp.ones((1, 3), bool))
    assert float(target[0, 0]) == pytest.approx(rewards[0] + g * rewards[1], rel=1e-5)


def test_target_table_holds_the_target_networks_values_and_follows_its_copies():
    """The targets looked up per cell equal the target network's on the batch, at init and after copies."""
    static = static_for_env("chain", chain_length=6, total_steps=60, log_every=30, buffer_size=100, hidden=(8,),
                            batch_size=8, n_step=2, target_update=10, count_features="exact", target_values="table",
                            parts=program_parts(["opiq"]))
    hp = method_hparams("chain", "opiq")
    runs = (RunSpec("opiq", "x", 0, hp), RunSpec("opiq", "x", 1, hp))
    experiment = Experiment(static, runs)
    trainer, init, train_chunk = compiled_trainer(static)
    network_trainer = compiled_trainer(dataclasses.replace(static, target_values="network"))[0]
    state = init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))
    window = Transition(
        compact=jnp.array([[[1], [2]], [[5], [0]]], jnp.int32), action=jnp.array([[1, 0], [0, 1]], jnp.int32),
        reward=jnp.zeros((2, 2)), terminated=jnp.zeros((2, 2), bool), done=jnp.zeros((2, 2), bool),
        next_compact=jnp.array([[[2], [3]], [[4], [5]]], jnp.int32),
    )
    env = trainer.stepping.env
    # compiled whole, not op by op (each operation would compile on its own)
    network_values = jax.jit(lambda run: trainer.network.apply(run.target_params, jax.vmap(
        env.obs_from_compact, in_axes=(0, None))(env.all_compacts(), run.env.params)))
    table_targets, network_targets = compiled_targets(trainer), compiled_targets(network_trainer)
    for chunk in range(3):  # at init, then after 30 and 60 steps (learning from step 9, a copy every 10)
        run = jax.tree.map(lambda x: x[1], state.runs)
        np.testing.assert_allclose(run.target_table[:, 0], network_values(run), rtol=1e-6)
        exists = jnp.ones((2, 2), bool)
        np.testing.assert_allclose(table_targets(run, window, exists)[0], network_targets(run, window, exists)[0],
                                   rtol=1e-6)
        if chunk < 2:
            before = np.asarray(state.runs.target_table)
            state, _ = train_chunk(state)
            assert not np.allclose(before, state.runs.target_table)  # the copies refreshed the table


def test_target_values_choice():
    """auto: the table in bfloat16 where there is a cell table; a table where there is none is refused."""
    chain, gymnax = static_for_env("chain"), static_for_env("gymnax:CartPole-v1")
    assert not uses_target_table(chain, make_stepping(chain))  # float32 keeps the path of the paper's results
    assert uses_target_table(dataclasses.replace(chain, precision="bfloat16"), make_stepping(chain))
    assert not uses_target_table(dataclasses.replace(gymnax, precision="bfloat16"), make_stepping(gymnax))
    with pytest.raises(ValueError, match="needs an environment with a cell table"):
        uses_target_table(dataclasses.replace(gymnax, target_values="table"), make_stepping(gymnax))
    with pytest.raises(ValueError, match="^target_values must be one of auto, table, network"):
        dataclasses.replace(chain, target_values="cells").validate()


def test_updates_target_copies_and_epsilon_follow_the_environment_steps():
    """One update every ``train_every`` environment steps once the replay holds more than a batch, the target
    network equal to the online network right after every ``target_update`` steps and unchanged between them, and
    epsilon at the run's step, checked after every step. (Several environments per run are the pool path's.)"""
    from opiq_jax.registry.methods import METHODS, Method, register_method
    from opiq_jax.parts import PARTS

    register_method(Method("dqn_tally", ("pseudocounts", Tally()), "DQN + PC, counting", settings={"chain": {}}))
    try:
        static = static_for_env("chain", chain_length=6, total_steps=24, log_every=1, buffer_size=24, hidden=(8,),
                                batch_size=4, train_every=2, target_update=4, rnd_batch=4,
                                parts=program_parts(["dqn_tally"]))
        hp = method_hparams("chain", "dqn_tally", epsilon_start=1.0, epsilon_end=0.0, epsilon_decay_steps=16.0)
        experiment = Experiment(static, (RunSpec("dqn_tally", "x", 0, hp),))
        _, init, train_chunk = compiled_trainer(static)
        state = init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))
        initial = jax.tree.leaves(jax.device_get(master_params(static, state.runs)))
        target = jax.device_get(state.runs.target_params)
        for steps in range(1, 25):  # one chunk: one environment step
            state, metrics = train_chunk(state)
            run = jax.device_get(state.runs)
            tally = {k: int(v[0]) for k, v in run.parts["test_tally"].items()}
            assert tally == {"steps": steps, "updates": len([s for s in range(2, steps + 1, 2) if s > 4])}, steps
            assert float(metrics["epsilon"][0]) == pytest.approx(max(0.0, 1.0 - steps / 16.0))
            online, copied = jax.tree.leaves(master_params(static, run)), jax.tree.leaves(run.target_params)
            if steps % 4 == 0:
                assert all(np.array_equal(a, b) for a, b in zip(online, copied)), steps
                target = run.target_params
            else:
                assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(target), copied)), steps
        assert tally["updates"] == 10 and not all(np.array_equal(a, b) for a, b in zip(online, initial))  # learned
    finally:
        METHODS.pop("dqn_tally")
        PARTS.pop("test_tally")


def initial_run_shapes(static):
    """The shapes of one DQN run's initial state under ``static``, traced, not computed."""
    experiment = Experiment(static, (RunSpec("dqn", "x", 0, method_hparams("chain", "dqn")),))
    keys = jax.random.split(jax.random.key(0), 1)
    return jax.eval_shape(make_train(static).init, keys, keys, stack_hparams(experiment.hparams())).runs


def test_each_weight_storage_keeps_a_subtree_of_only_its_own_fields():
    """``RunState.weights`` is the storage's own subtree: the fields that storage uses, each holding arrays of the
    dtypes it keeps (no None in place of another storage's field), and the run's state has no weight fields beside
    it."""
    from opiq_jax.agent.weights import ComputeCopyStored, Float32Stored, PackedStored
    from opiq_jax.primitives.state import RunState

    f32, bf16, u8 = np.dtype(np.float32), np.dtype(jnp.bfloat16), np.dtype(np.uint8)
    storages = {  # overrides -> (subtree, {field: the dtypes of its leaves}); the copies keep a float32 output layer
        (): (Float32Stored, {"params": {f32}, "opt_state": {f32}}),
        ("bfloat16",): (ComputeCopyStored, {"params": {f32}, "opt_state": {f32}, "compute": {bf16, f32}}),
        ("bfloat16", "packed"): (PackedStored, {"compute": {bf16, f32}, "low": {u8}, "accumulator": {bf16}}),
    }
    chain = static_for_env("chain", chain_length=8, hidden=(16,), total_steps=100, log_every=100, buffer_size=100,
                           parts=program_parts(["dqn"]))
    for values, (subtree, dtypes) in storages.items():
        options = dict(zip(("precision", "weight_storage"), values))
        weights = initial_run_shapes(dataclasses.replace(chain, **options)).weights
        assert type(weights) is subtree, options
        assert [field.name for field in dataclasses.fields(weights)] == list(dtypes), options
        for name, allowed in dtypes.items():  # no field is None (an empty tree has no dtypes)
            leaves = jax.tree.leaves(getattr(weights, name))
            assert {leaf.dtype for leaf in leaves} == allowed, (options, name)
    weight_fields = {"params", "opt_state", "compute_params", "params_low"}
    assert not weight_fields & {field.name for field in dataclasses.fields(RunState)}


def test_performance_modes_are_strategies_the_agent_chooses_once():
    """How the weights are stored and where the target values come from are objects chosen when the agent is built;
    the trainer asks them, and tests none of the modes itself."""
    import inspect
    import re

    from opiq_jax.agent import trainer
    from opiq_jax.agent.bootstrap_values import NetworkTargets, TableTargets
    from opiq_jax.agent.weights import ComputeCopyWeights, Float32Weights, PackedWeights

    chain = static_for_env("chain", chain_length=8, hidden=(16,), total_steps=100, log_every=100)
    chosen = {}
    for overrides in ({}, {"precision": "bfloat16"}, {"precision": "bfloat16", "weight_storage": "packed"},
                      {"precision": "bfloat16", "target_values": "network"}):
        agent = make_train(dataclasses.replace(chain, **overrides)).agent
        chosen[tuple(overrides.values())] = (type(agent.weights), type(agent.targets))
    assert chosen == {(): (Float32Weights, NetworkTargets), ("bfloat16",): (ComputeCopyWeights, TableTargets),
                      ("bfloat16", "packed"): (PackedWeights, TableTargets),
                      ("bfloat16", "network"): (ComputeCopyWeights, NetworkTargets)}
    source = inspect.getsource(trainer)
    assert not re.search(r"params is (not )?None", source)
    assert not re.search(r"\bagent\.(packed|mixed_precision|table)\b|self\.(packed|mixed_precision|table)\b", source)
    assert not re.search(r"weight_storage ?[!=]=|target_values ?[!=]=|\.precision ?[!=]= ?\"float32\"", source)
