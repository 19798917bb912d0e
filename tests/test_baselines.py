"""The baselines with networks of their own (DORA, RND, BSP) and the numbers-only variants
(R-Subtract, Bias): each bonus source against hand-computed values, and what each must leave alone."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent.bootstrap_values import TableTargets
from opiq_jax.agent.trainer import majority_vote, make_optimiser, make_train, td_loss_per_head
from opiq_jax.common.config import stack_hparams
from opiq_jax.parts.bsp import scale_torso_gradients
from opiq_jax.parts.dora import dora_bonus, dora_sarsa_target
from opiq_jax.parts.rnd import rnd_bonus, rnd_loss
from opiq_jax.contracts.compact import Transition
from opiq_jax.primitives.networks import make_network
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.registry.methods import METHODS, get_method, program_name, program_parts
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import Experiment, RunSpec, run_keys_for, split_by_program
from tests.training import batch_of, compiled_targets, train_chunks

BASE = dict(chain_length=10, hidden=(32, 32), buffer_size=600, batch_size=16, total_steps=400, log_every=200)


def trained(method, seeds=2, chunks=1, bsp_heads=3, **static_overrides):
    """Initial and trained state of ``method`` on a small chain, compiled once per program."""
    static = static_for_env("chain", **{**BASE, "parts": program_parts([method]), "bsp_heads": bsp_heads,
                                        **static_overrides})
    runs = tuple(RunSpec(method, "p", s, method_hparams("chain", method)) for s in range(seeds))
    initial, final, history = train_chunks(Experiment(static, runs), chunks)
    return compiled_trainer(static)[0], initial, final, history[-1]


def first_run(tree):
    return jax.tree.map(lambda x: jnp.asarray(x[0]), tree)


# ------------------------------------------------------------------------------------ method table


def program_of(method):
    return program_name(get_method(method).part_names)


def test_every_paper_method_is_selectable_with_its_parts():
    assert set(METHODS) >= {"dqn", "dqn_pc", "dqn_rsubtract", "dqn_rsubtract_pc", "dqn_bias", "dqn_bias_pc",
                            "dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp", "opiq", "opiq_no_ob", "opiq_no_pc"}
    assert program_of("dqn_dora") == program_of("dqn_dora_oa") == "dora"
    assert program_of("dqn_rnd") == "rnd" and program_of("bsp") == "bsp"
    assert {program_of(m) for m in METHODS if m not in ("dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp")} == {"plain"}
    assert get_method("opiq").part_names == ("pseudocounts", "optimism")
    assert get_method("opiq_no_pc").part_names == ("optimism",) and get_method("dqn").part_names == ()
    maze = {m: method_hparams("maze", m) for m in ("dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp")}
    assert maze["dqn_dora"]["beta_dora"] == pytest.approx(0.01) and "beta" not in maze["dqn_dora"]
    assert maze["dqn_dora_oa"]["beta_dora_action"] == pytest.approx(0.1)
    assert maze["dqn_rnd"]["beta_rnd"] == 10.0 and maze["bsp"]["beta_bsp"] == 100.0


def test_mixed_methods_split_into_one_program_per_group():
    static = static_for_env("chain", **BASE, bsp_heads=4)
    runs = tuple(RunSpec(m, "p", s, method_hparams("chain", m))
                 for m in ("opiq", "bsp", "dqn_dora", "dqn", "dqn_dora_oa") for s in range(2))
    groups = split_by_program(Experiment(static, runs))
    assert list(groups) == ["plain", "bsp", "dora"]
    assert [r.method for r in groups["dora"].runs] == ["dqn_dora"] * 2 + ["dqn_dora_oa"] * 2
    assert groups["bsp"].static.part("bsp").heads == 4
    # the count-based parts are in every program (off, at their defaults, for methods without them)
    assert groups["dora"].static.parts == ("pseudocounts", "optimism", "dora")
    assert groups["plain"].static.parts == ("pseudocounts", "optimism")
    dqn = groups["plain"].hparams()[2]  # the first dqn run: its program's numbers at their off defaults
    assert float(dqn["beta"]) == 0.0 and float(dqn["c_action"]) == 0.0 and float(dqn["c_bootstrap"]) == 0.0


# ------------------------------------------------------------------------------------ DORA


def test_dora_bonus_by_hand():
    logits = jnp.array([0.0, -2.0, 3.0])  # E = sigmoid(logit)
    expected = [0.3 / math.sqrt(-math.log(1 / (1 + math.exp(-x)))) for x in (0.0, -2.0, 3.0)]
    np.testing.assert_allclose(dora_bonus(logits, 0.3), expected, rtol=1e-5)
    assert float(dora_bonus(jnp.float32(0.0), 1.0)) == pytest.approx(1 / math.sqrt(math.log(2)), rel=1e-6)


def test_dora_sarsa_target_with_zero_reward_by_hand():
    g = 0.9
    e = jnp.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]])  # E(s', .) of each of n + 1 = 4 steps
    actions = jnp.array([0, 1, 1, 0])
    no, yes = jnp.zeros(4, bool), jnp.ones(4, bool)

    def target(done=no, terminated=no, exists=yes):
        return float(dora_sarsa_target(e, actions, done, terminated, exists, g)[0])

    # full window: gamma^3 E(s_3, a_3), where s_3 is step 2's next state and a_3 = 0 the action of step 3
    assert target() == pytest.approx(g**3 * 0.5)
    # terminated on step 1: no bootstrap
    ended = jnp.array([False, True, False, False])
    assert target(done=ended, terminated=ended) == 0.0
    # truncated on step 1: the next action is unknown, so the mean over actions of E(s_2, .)
    assert target(done=ended) == pytest.approx(g**2 * 0.35)
    # only steps 0 and 1 stored yet: stop there, mean over actions again
    assert target(exists=jnp.array([True, True, False, False])) == pytest.approx(g**2 * 0.35)
    # steps 0..2 stored: a full 3-step window whose next action is not stored yet
    assert target(exists=jnp.array([True, True, True, False])) == pytest.approx(g**3 * 0.55)


@pytest.fixture(scope="module")
def dora():
    return trained("dqn_dora_oa", chunks=2)


def test_dora_e_network_starts_at_one_half_and_sarsa_drives_it_down(dora):
    trainer, initial, final, _ = dora
    static, env = trainer.static, trainer.stepping.env
    e_net = make_network("mlp", env.num_actions, static.hidden)
    run0, run1 = first_run(initial.runs), first_run(final.runs)
    start_obs = env.obs_from_compact(env.start_compact(run0.env.params), run0.env.params)[None]
    np.testing.assert_array_equal(e_net.apply(run0.parts["dora"].params, start_obs), 0.0)  # zero final layer: E = 0.5
    e_after = jax.nn.sigmoid(e_net.apply(run1.parts["dora"].params, start_obs))
    assert float(jnp.max(e_after)) < 0.45, "E(s0, .) should decay below its initial 0.5 after 200 updates"
    assert run1.parts["dora"].buffer.capacity == static.part("dora").buffer_factor * static.batch_size


def test_dora_intrinsic_reward_recomputed_from_the_e_network(dora):
    trainer, _, final, _ = dora
    run, env = first_run(final.runs), trainer.stepping.env
    e_net = make_network("mlp", env.num_actions, trainer.static.hidden)
    windows = jax.tree.map(lambda x: x[:4, None], run.memory.items)  # four stored steps, n = 1
    _, intrinsic = compiled_targets(trainer)(run, windows, jnp.ones((4, 1), bool))
    obs = jax.jit(jax.vmap(env.obs_from_compact, in_axes=(0, None)))(windows.compact[:, 0], run.env.params)
    logits = jax.jit(e_net.apply)(run.parts["dora"].params, obs)[jnp.arange(4), windows.action[:, 0]]
    e_values = 1 / (1 + np.exp(-np.asarray(logits, np.float64)))
    np.testing.assert_allclose(intrinsic[:, 0], 0.01 / np.sqrt(-np.log(e_values)), rtol=1e-4)  # beta_dora 0.01, no PC


# ------------------------------------------------------------------------------------ RND


def test_rnd_bonus_and_loss_by_hand():
    predicted = jnp.array([[1.0, 2.0], [0.0, 0.0]])
    target = jnp.array([[0.0, 0.0], [3.0, 4.0]])
    np.testing.assert_allclose(rnd_bonus(predicted, target, 0.5), [2.5, 12.5])
    assert float(rnd_loss(predicted, target, jnp.ones(2))) == pytest.approx(15.0)  # (5 + 25) / 2
    assert float(rnd_loss(predicted, target, jnp.array([1.0, 0.0]))) == pytest.approx(5.0)  # an unstored row weighs 0
    assert float(rnd_loss(predicted, target, jnp.zeros(2))) == 0.0  # nothing stored yet: no NaN


def test_rnd_predictor_takes_one_step_on_the_most_recent_states_per_update():
    """With training starting at step batch + 1, a chunk of batch + 1 steps makes exactly one update:
    the predictor must equal one RMSProp step from its initial parameters on the ``rnd_batch`` newest states."""
    batch = BASE["batch_size"]
    trainer, initial, final, metrics = trained("dqn_rnd", seeds=1, total_steps=batch + 1, log_every=batch + 1,
                                               rnd_batch=8)
    run0, run1, env = first_run(initial.runs), first_run(final.runs), trainer.stepping.env
    rnd0, rnd1 = run0.parts["rnd"], run1.parts["rnd"]
    jax.tree.map(np.testing.assert_array_equal, rnd0.target_params, rnd1.target_params)  # target fixed
    net = make_network("mlp", trainer.static.part("rnd").outputs, trainer.static.hidden)
    buffer = run1.memory
    newest = (np.asarray(buffer.position) - 1 - np.arange(8)) % buffer.capacity
    # The computations by hand are compiled whole (op by op, each of their operations would compile on its own).
    observations = jax.jit(jax.vmap(env.obs_from_compact, in_axes=(0, None)))

    @jax.jit
    def one_step(rnd, obs):
        """One RMSProp step from ``rnd``'s predictor on the mean squared error (all eight stored), by hand, not
        the module's own loss function."""
        target = net.apply(rnd.target_params, obs)
        grads = jax.grad(lambda p: jnp.mean(jnp.sum((net.apply(p, obs) - target) ** 2, axis=-1)))(rnd.params)
        optimiser = make_optimiser(trainer.static)
        updates, _ = optimiser.update(grads, optimiser.init(rnd.params), rnd.params)
        return jax.tree.map(lambda p, u: p - 5e-4 * u, rnd.params, updates)

    expected = one_step(rnd0, observations(buffer.items.next_compact[newest], run1.env.params))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), rnd1.params, expected)
    # the intrinsic reward is the squared error at the reached state, scaled by beta_rnd = 10
    windows = jax.tree.map(lambda x: x[newest[:3], None], buffer.items)
    _, intrinsic = compiled_targets(trainer)(run1, windows, jnp.ones((3, 1), bool))
    reached = observations(windows.next_compact[:, 0], run1.env.params)
    outputs = jax.jit(net.apply)
    by_hand = 10.0 * np.sum((outputs(rnd1.params, reached) - outputs(rnd1.target_params, reached)) ** 2, axis=1)
    np.testing.assert_allclose(intrinsic[:, 0], by_hand, rtol=1e-4)


# ------------------------------------------------------------------------------------ BSP


def test_majority_vote_and_torso_gradient_scaling():
    q = jnp.array([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 5.0, 1.0], [0.0, 0.0, 9.0]])
    assert int(majority_vote(q)) == 1  # heads vote 1, 0, 1, 2
    assert int(majority_vote(jnp.array([[1.0, 0.0], [0.0, 1.0]]))) == 0  # tie: lowest index
    grads = {"params": {"torso": {"w": jnp.ones(2)}, "heads": {"w": jnp.ones(3)}}}
    scaled = scale_torso_gradients(grads, 0.1)
    np.testing.assert_allclose(scaled["params"]["torso"]["w"], 0.1)
    np.testing.assert_array_equal(scaled["params"]["heads"]["w"], 1.0)


def test_bsp_prior_stays_fixed_while_the_heads_learn():
    trainer, initial, final, metrics = trained("bsp", seeds=2, chunks=1)
    run0, run1 = initial.runs, final.runs
    jax.tree.map(np.testing.assert_array_equal, run0.parts["bsp"], run1.parts["bsp"])
    online0, online1 = (trainer.agent.weights.master(r)["params"] for r in (run0, run1))
    heads0, heads1 = online0["heads"], online1["heads"]
    assert heads0["head"]["kernel"].shape[1] == 3  # [runs, K, ...]
    changed = jax.tree.map(lambda a, b: bool(np.any(a != b)), heads0, heads1)
    assert all(jax.tree.leaves(changed))
    assert np.any(online0["torso"]["Dense_0"]["kernel"] != online1["torso"]["Dense_0"]["kernel"])
    # each head's output is Q_k + beta_bsp p_k, beta_bsp = 100 on the chain
    run, env = first_run(run1), trainer.stepping.env
    obs = env.obs_from_compact(env.start_compact(run.env.params), run.env.params)[None]
    online = trainer.agent.forward_params(run)
    expected = trainer.network.apply(online, obs) + 100.0 * trainer.network.apply(run.parts["bsp"], obs)
    np.testing.assert_allclose(trainer.agent.head_values(run, online, obs), expected, rtol=1e-5)
    assert np.all(np.isfinite(metrics["test_return"]))


def prior_table_window():
    """Two hand-made two-step windows of the chain and which of their steps are stored."""
    window = Transition(
        compact=jnp.array([[[1], [2]], [[5], [4]]], jnp.int32), action=jnp.array([[1, 0], [0, 1]], jnp.int32),
        reward=jnp.zeros((2, 2)), terminated=jnp.zeros((2, 2), bool), done=jnp.zeros((2, 2), bool),
        next_compact=jnp.array([[[2], [3]], [[4], [5]]], jnp.int32),
    )
    return window, jnp.ones((2, 2), bool)


def compiled_loss(trainer, window, exists):
    """``(run, targets) -> TD loss`` of the hand-made windows against ``targets``, as the trainer computes it."""
    def loss(run, targets):
        batch = batch_of(trainer, run, window, exists)
        return td_loss_per_head(trainer.agent.forward_params(run), trainer.agent, run, batch, targets)
    return jax.jit(loss)


def bsp_chain_run(**options):
    """The compiled trainer of BSP (3 heads) on a short chain with ``options``, and its first run's initial state."""
    static = static_for_env("chain", **{**BASE, "parts": program_parts(["bsp"]), "bsp_heads": 3, "n_step": 2,
                                        **options})
    experiment = Experiment(static, (RunSpec("bsp", "p", 0, method_hparams("chain", "bsp")),))
    trainer, init, _ = compiled_trainer(static)
    return trainer, first_run(init(*run_keys_for(experiment), stack_hparams(experiment.hparams())).runs)


def per_cell_prior(trainer, run):
    """``[cells, K, A]``: the prior network's values on each cell's observation alone (a batch of one)."""
    env, apply = trainer.stepping.env, jax.jit(trainer.network.apply)
    cell_obs = jax.vmap(env.obs_from_compact, in_axes=(0, None))(env.all_compacts(), run.env.params)
    prior = {"params": run.parts["bsp"]["params"]}
    return np.stack([apply(prior, cell_obs[cell:cell + 1])[0] for cell in range(cell_obs.shape[0])])


def test_bsp_prior_table_holds_the_prior_per_cell_and_the_loss_and_targets_read_it():
    """prior_values='table': each cell's prior values are the prior network's on that cell alone; the loss, the
    targets and the target table give what the prior network gives, and they read the table (shifting it moves
    each)."""
    table_trainer, table_run = bsp_chain_run(prior_values="table")
    network_trainer, network_run = bsp_chain_run(prior_values="network")
    prior = table_run.parts["bsp"]
    assert set(network_run.parts["bsp"]) == {"params"}  # without the table: the network's variables, as ever
    jax.tree.map(np.testing.assert_array_equal, prior["params"], network_run.parts["bsp"]["params"])
    # alike to rounding: a batch of cells sums in another order than a batch of one
    np.testing.assert_allclose(prior["cell_values"], per_cell_prior(table_trainer, table_run), rtol=1e-5, atol=1e-7)
    window, exists = prior_table_window()
    table_targets = compiled_targets(table_trainer)(table_run, window, exists)[0]
    np.testing.assert_allclose(table_targets, compiled_targets(network_trainer)(network_run, window, exists)[0],
                               rtol=1e-5)
    table_loss = compiled_loss(table_trainer, window, exists)(table_run, table_targets)
    np.testing.assert_allclose(table_loss, compiled_loss(network_trainer, window, exists)(network_run, table_targets),
                               rtol=1e-5)
    target_table = lambda trainer: jax.jit(  # noqa: E731
        lambda run: TableTargets().copied(trainer.agent, run).target_table)
    np.testing.assert_allclose(target_table(table_trainer)(table_run), target_table(network_trainer)(network_run),
                               rtol=1e-5, atol=1e-6)
    shifted = table_run.replace(parts={"bsp": {**prior, "cell_values": prior["cell_values"] + 1.0}})
    # beta_bsp = 100 on the chain: the bootstrap values rise by 100 * gamma^2, the online values by 100
    shifted_targets = compiled_targets(table_trainer)(shifted, window, exists)[0]
    np.testing.assert_allclose(shifted_targets - table_targets, 100.0 * table_trainer.static.gamma ** 2, rtol=1e-3)
    shifted_loss = compiled_loss(table_trainer, window, exists)(shifted, table_targets)  # the same targets
    assert abs(float(shifted_loss) - float(table_loss)) > 1.0
    np.testing.assert_allclose(target_table(table_trainer)(shifted) - target_table(table_trainer)(table_run), 100.0,
                               rtol=1e-3)


def test_bsp_prior_table_in_bfloat16_holds_the_prior_to_its_rounding():
    """auto in bfloat16 tabulates the prior; the hidden layers round to 8 bits of significand, so a batch of cells and
    a batch of one agree to that rounding, not to float32's."""
    trainer, run = bsp_chain_run(precision="bfloat16")
    table, by_cell = np.asarray(run.parts["bsp"]["cell_values"]), per_cell_prior(trainer, run)
    assert table.shape == by_cell.shape and np.all(np.isfinite(table))
    np.testing.assert_allclose(table, by_cell, rtol=0, atol=2 ** -7 * np.max(np.abs(by_cell)))


def test_prior_values_choice():
    """auto: the prior table in bfloat16 where there is a cell table, said in config.json's resolved; a table where
    there is none is refused."""
    def resolved(env, **options):
        return make_train(static_for_env(env, parts=program_parts(["bsp"]), **options)).agent.resolved()
    assert resolved("chain")["prior_values"] == "network"  # float32 keeps the path of the paper's results
    assert resolved("maze", precision="bfloat16")["prior_values"] == "table"
    assert resolved("gymnax:CartPole-v1", precision="bfloat16")["prior_values"] == "network"
    with pytest.raises(ValueError, match="prior_values='table' needs an environment with a cell table"):
        resolved("gymnax:CartPole-v1", prior_values="table")
    assert "prior_values" not in make_train(static_for_env("chain")).agent.resolved()  # a program without BSP
    with pytest.raises(ValueError, match="must be one of auto, table, network"):
        static_for_env("chain", parts=program_parts(["bsp"]), prior_values="cells").validate()


# ------------------------------------------------------------------------------------ numbers-only variants


def test_r_subtract_shifts_stored_rewards_only():
    """Before training starts (fewer steps than a batch) DQN and DQN R-Subtract act identically:
    their stored rewards differ by the constant and their reported returns not at all."""
    static = static_for_env("chain", **{**BASE, "batch_size": 64, "total_steps": 60, "log_every": 60,
                                        "parts": program_parts(["dqn_pc"])})
    settings = [method_hparams("chain", "dqn_pc"), method_hparams("chain", "dqn_rsubtract_pc", reward_subtract=0.25)]
    runs = tuple(RunSpec(m, "p", 0, hp) for m, hp in zip(("dqn_pc", "dqn_rsubtract_pc"), settings))
    experiment = Experiment(static, runs)
    _, init, train_chunk = compiled_trainer(static)
    state, metrics = train_chunk(init(*run_keys_for(experiment), stack_hparams(experiment.hparams())))
    items = jax.device_get(state.runs.memory.items)
    np.testing.assert_array_equal(items.action[0], items.action[1])
    np.testing.assert_allclose(items.reward[0][:60] - items.reward[1][:60], 0.25, rtol=1e-6)
    assert metrics["max_return"][0] == metrics["max_return"][1]


def test_dora_oa_changes_only_action_selection():
    """With beta_dora_action = 0, DORA OA is DQN + DORA exactly; with it on, the actions differ."""
    static = static_for_env("chain", **{**BASE, "parts": program_parts(["dqn_dora"])})
    settings = [method_hparams("chain", "dqn_dora"), method_hparams("chain", "dqn_dora_oa", beta_dora_action=0.0),
                method_hparams("chain", "dqn_dora_oa", beta_dora_action=10.0)]
    runs = tuple(RunSpec(m, "p", 0, hp) for m, hp in zip(("dqn_dora", "dqn_dora_oa", "dqn_dora_oa"), settings))
    experiment = Experiment(static, runs)
    _, init, train_chunk = compiled_trainer(static)
    state, _ = train_chunk(init(*run_keys_for(experiment), stack_hparams(experiment.hparams())))
    actions = np.asarray(state.runs.memory.items.action)
    np.testing.assert_array_equal(actions[0], actions[1])
    assert np.any(actions[0] != actions[2])
