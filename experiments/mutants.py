"""The mutants of ``experiments/mutation_testing.py``: small, plausible slips in the core, each with the tests that
must catch it.

A mutant replaces one exact snippet of one file (the snippet must occur exactly once, else the mutant is reported
*stale*: the code moved on and the mutant needs updating, it is never silently skipped). ``tests`` are pytest node
ids, few and targeted, so that the whole list runs in well under an hour on a CPU; the first one that fails is
recorded as the killer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    """One slip: ``original`` (exact, once in ``file``) becomes ``replacement``."""

    id: str
    file: str
    original: str
    replacement: str
    description: str
    tests: tuple[str, ...]


V = "tests/test_values.py::"
PIECES = "tests/test_pieces.py::"
COUNTS = "tests/test_counts.py::"
BASE = "tests/test_baselines.py::"
MR = "tests/test_montezuma.py::"
ENVS = "tests/test_envs.py::"

MONTEZUMA_TARGET = V + "test_montezuma_n_step_q_plus_target_with_mixed_monte_carlo_by_hand"
MONTEZUMA_CLIP = V + "test_montezuma_stores_clipped_rewards_and_reports_unclipped_returns"
MONTEZUMA_COUNTS = V + "test_montezuma_counts_every_real_step_and_no_reset_step"
ACTING = V + "test_trainer_acts_greedily_on_q_plus_with_c_action_not_c_bootstrap"
ACTING_TABLE = V + "test_greedy_action_is_argmax_of_q_plus_c_action_bonus_on_a_hand_made_count_table"
RESUME = V + "test_resume_drops_the_rows_of_a_chunk_written_after_the_checkpoint_and_matches_an_uninterrupted_run"
CHECKPOINTS = V + "test_checkpoints_read_back_the_newest_values_and_fall_back_past_a_damaged_one"
PRIOR_TABLE_TEST = BASE + "test_bsp_prior_table_holds_the_prior_per_cell_and_the_loss_and_targets_read_it"
FRAMES = "tests/test_frame_checkpoints.py::"
ATARI = "tests/test_atari.py::"
POOLS = "tests/test_device_pools.py::"
METRICS_RESTORED = ("tests/test_faults.py::test_a_damaged_metrics_file_is_restored_from_the_checkpoints_copy_and_the_"
                    "resume_leaves_no_gap")
METRICS_KEPT = "tests/test_faults.py::test_rows_no_checkpoint_covers_are_kept_aside_never_deleted"
SWEEP_LABELS = "tests/test_sweep.py::test_every_runs_label_names_the_hyperparameters_it_trains_with"
MEMORY_FREED = ("tests/test_runner.py::test_programs_trained_one_after_another_free_the_device_memory_of_the_one_"
                "before")
CHECKED_ONCE = "tests/test_runner.py::test_the_grouping_into_programs_and_the_memory_check_happen_once_per_experiment"
SHARDED_TEST = "tests/test_runner.py::test_runs_sharded_over_four_host_devices_match_one_device"
LAYERS = "tests/test_layers.py::test_the_package_import_graph_has_no_circle"
SCHEDULES = "tests/test_trainer.py::test_updates_target_copies_and_epsilon_follow_the_environment_steps"
PACKED = "tests/test_packed_state.py::"
LEAN = "tests/test_mlp_backward.py::"
ENVS_PER_RUN = "tests/test_schedules.py::test_updates_target_copies_and_epsilon_count_the_runs_environment_steps"
N_STEP_CHAIN = "tests/test_trainer.py::test_n_step_q_plus_target_by_hand"
DIAG = "tests/test_diagnostics.py::"

MUTANTS: tuple[Mutant, ...] = (
    # ------------------------------------------------------------------ counts
    Mutant("counts-query-max", "opiq_jax/counts.py",
           "return jnp.min(sketch[action, rows, columns])", "return jnp.max(sketch[action, rows, columns])",
           "count-min query takes the max of the rows", (V + "test_count_min_query_reads_the_smallest_row_where_one_row_collides",)),
    Mutant("counts-query-all-max", "opiq_jax/counts.py",
           "return jnp.min(sketch[:, rows, columns], axis=-1)", "return jnp.max(sketch[:, rows, columns], axis=-1)",
           "query_all_actions takes the max of the rows", (V + "test_count_min_query_reads_the_smallest_row_where_one_row_collides",)),
    Mutant("counts-update-ignores-valid", "opiq_jax/counts.py",
           ".add(jnp.asarray(valid, jnp.int32))", ".add(jnp.int32(1))",
           "update counts masked (reset) steps too", (COUNTS + "test_update_respects_valid_flag_and_action",)),
    Mutant("counts-simhash-sign", "opiq_jax/counts.py",
           "precision=jax.lax.Precision.HIGHEST) > 0", "precision=jax.lax.Precision.HIGHEST) < 0",
           "SimHash bit set for a negative projection", (COUNTS + "test_simhash_bits_are_signs_of_projection",)),
    Mutant("counts-montezuma-levels", "opiq_jax/counts.py",
           "jnp.floor(small / 32.0 + 1e-4)", "jnp.floor(small / 31.0 + 1e-4)",
           "Montezuma feature binned by 31 instead of 32", (COUNTS + "test_montezuma_feature_of_constant_frames",)),
    # ------------------------------------------------------------------ optimism
    Mutant("optimism-no-plus-one", "opiq_jax/parts/optimism.py",
           "jnp.power(counts.astype(jnp.float32) + 1.0, exponent)", "jnp.power(counts.astype(jnp.float32) + 2.0, exponent)",
           "bonus C / (N + 2)^M", (PIECES + "test_optimism_bonus_by_hand",)),
    Mutant("optimism-action-uses-c-bootstrap", "opiq_jax/parts/optimism.py",
           'optimism_bonus(counts, run.hparams["c_action"]', 'optimism_bonus(counts, run.hparams["c_bootstrap"]',
           "acting bonus scaled by C_bootstrap", (ACTING_TABLE, ACTING)),
    Mutant("optimism-bootstrap-uses-c-action", "opiq_jax/parts/optimism.py",
           'optimism_bonus(batch.next_counts, run.hparams["c_bootstrap"]', 'optimism_bonus(batch.next_counts, run.hparams["c_action"]',
           "bootstrap bonus scaled by C_action (Montezuma: 0.1 for 0.01)", (MONTEZUMA_TARGET,)),
    # ------------------------------------------------------------------ targets
    Mutant("targets-window-includes-after-end", "opiq_jax/targets.py",
           "ended_before = jnp.cumsum(done.astype(jnp.int32), axis=-1) - done.astype(jnp.int32)",
           "ended_before = jnp.cumsum(done.astype(jnp.int32), axis=-1) - 1",
           "window mask off by one at an episode end", (PIECES + "test_window_mask_stops_after_episode_end_and_missing_steps",)),
    Mutant("targets-discount-power", "opiq_jax/targets.py",
           "discount = gamma ** (last + 1).astype(jnp.float32)", "discount = gamma ** last.astype(jnp.float32)",
           "bootstrap discounted by gamma^(L-1)", (PIECES + "test_n_step_return_full_window",)),
    Mutant("targets-bootstrap-through-terminal", "opiq_jax/targets.py",
           " * (1.0 - terminated[last].astype(jnp.float32))", "",
           "bootstraps through a true terminal", (PIECES + "test_n_step_return_stops_at_terminal_without_bootstrap",)),
    Mutant("targets-mmc-no-weight", "opiq_jax/targets.py",
           "return (1.0 - beta_mmc) * target + beta_mmc * mc_return", "return target + beta_mmc * mc_return",
           "mixed Monte Carlo keeps the full bootstrap target", (PIECES + "test_mixed_monte_carlo_by_hand",)),
    Mutant("targets-max-split", "opiq_jax/targets.py",
           "return jnp.max(q_next + bonus_next, axis=-1)", "return jnp.max(q_next, axis=-1) + jnp.max(bonus_next, axis=-1)",
           "Q+ bootstrap maxes Q and bonus separately", (PIECES + "test_q_plus_target_by_hand",)),
    Mutant("targets-td-gradient-through-target", "opiq_jax/targets.py",
           "jnp.square(q_taken - jax.lax.stop_gradient(target))", "jnp.square(q_taken - target)",
           "TD loss differentiates the target", (PIECES + "test_td_loss_is_mean_squared_error",)),
    # ------------------------------------------------------------------ pseudocounts
    Mutant("pseudocounts-one-over-n", "opiq_jax/parts/pseudocounts.py",
           "beta * jax.lax.rsqrt(jnp.maximum(counts.astype(jnp.float32), 1.0))",
           "beta / jnp.maximum(counts.astype(jnp.float32), 1.0)",
           "intrinsic reward beta / N", (PIECES + "test_intrinsic_reward_by_hand",)),
    # ------------------------------------------------------------------ replay
    Mutant("replay-window-past-newest", "opiq_jax/replay.py",
           "exists = ages < buffer.size", "exists = ages <= buffer.size",
           "windows run one step past the newest item", (PIECES + "test_replay_ring_overwrites_oldest_and_windows_follow_insertion_order",)),
    Mutant("replay-position-clamped", "opiq_jax/replay.py",
           "position=(buffer.position + 1) % capacity,", "position=jnp.minimum(buffer.position + 1, capacity - 1),",
           "ring position clamped instead of wrapped", (PIECES + "test_replay_ring_overwrites_oldest_and_windows_follow_insertion_order",)),
    Mutant("replay-oldest-is-slot-0", "opiq_jax/replay.py",
           "oldest = (buffer.position - buffer.size) % capacity", "oldest = 0 * buffer.position",
           "windows start from slot 0, not the oldest item", (PIECES + "test_replay_ring_overwrites_oldest_and_windows_follow_insertion_order",)),
    # ------------------------------------------------------------------ frame replay
    Mutant("frames-mc-undiscounted", "opiq_jax/frame_replay.py",
           "decay = jnp.asarray(gamma, jnp.float32) * continues", "decay = continues.astype(jnp.float32)",
           "Monte Carlo returns not discounted", (MR + "test_fill_episode_returns_by_hand",)),
    Mutant("frames-window-crosses-reset", "opiq_jax/frame_replay.py",
           "step_ok = (step_ages < size) & ~buffer.first[step_slots] & ~ended_before",
           "step_ok = (step_ages < size) & ~ended_before",
           "n-step windows run into a restart's first slot", (V + "test_frame_replay_windows_stop_at_a_restart_that_no_episode_end_precedes",)),
    Mutant("frames-stack-crosses-episode", "opiq_jax/frame_replay.py",
           "jnp.where(is_first.any(-1), jnp.argmax(is_first, -1), stack - 1)",
           "jnp.where(is_first.any(-1), jnp.argmax(is_first, -1) + 1, stack - 1)",
           "frame stacks take a frame of the previous episode", (MR + "test_stack_rebuild_never_crosses_episodes",)),
    Mutant("frames-mc-of-start-slot", "opiq_jax/frame_replay.py",
           "mc_return=buffer.mc_return[step_slots[:, 0]],", "mc_return=buffer.mc_return[_slot_of_age(buffer, start)],",
           "sampled Monte Carlo return one slot early", (MONTEZUMA_TARGET,)),
    # ------------------------------------------------------------------ environments
    Mutant("chain-ignores-flips", "envs/chain.py",
           "move = (action + flips[pos]) % 2", "move = action % 2",
           "chain ignores its per-state action flips", (ENVS + "test_chain_matches_numpy",)),
    Mutant("chain-reward-one-early", "envs/chain.py",
           "(move == 1) & (pos == length - 1), RIGHT_REWARD", "(move == 1) & (pos == length - 2), RIGHT_REWARD",
           "chain pays the right reward one state early", (ENVS + "test_chain_best_and_left_returns",)),
    Mutant("maze-walls-open-vertically", "envs/maze.py",
           "row = jnp.where(blocked, state.row, row).astype(jnp.int32)", "row = row.astype(jnp.int32)",
           "maze lets the agent into a wall row", (ENVS + "test_maze_walls_block",)),
    Mutant("maze-goal-transposed", "envs/maze.py",
           "return (state.row == MAZE_GOAL[0]) & (state.col == MAZE_GOAL[1])",
           "return (state.row == MAZE_GOAL[1]) & (state.col == MAZE_GOAL[0])",
           "maze goal at (5, 16) instead of (16, 5)", (ENVS + "test_maze_bfs_path_in_jax",)),
    # ------------------------------------------------------------------ DORA, RND, BSP
    Mutant("dora-log-one-minus-e", "opiq_jax/parts/dora.py",
           "return jax.nn.softplus(-e_logits)", "return jax.nn.softplus(e_logits)",
           "DORA's count from -log(1 - E)", (BASE + "test_dora_bonus_by_hand",)),
    Mutant("dora-bootstrap-through-terminal", "opiq_jax/parts/dora.py",
           "value = jnp.where(terminated[last], 0.0, value)", "value = value",
           "DORA's SARSA bootstraps through a terminal", (BASE + "test_dora_sarsa_target_with_zero_reward_by_hand",)),
    Mutant("dora-oa-uses-beta-dora", "opiq_jax/parts/dora.py",
           'run.hparams["beta_dora_action"])', 'run.hparams["beta_dora"])',
           "DORA OA's action bonus scaled by beta_dora", (BASE + "test_dora_oa_changes_only_action_selection",)),
    Mutant("rnd-bonus-mean", "opiq_jax/parts/rnd.py",
           "return scale * jnp.sum(jnp.square(predicted - jax.lax.stop_gradient(target)), axis=-1)",
           "return scale * jnp.mean(jnp.square(predicted - jax.lax.stop_gradient(target)), axis=-1)",
           "RND bonus averages instead of sums the squared error", (BASE + "test_rnd_bonus_and_loss_by_hand",)),
    Mutant("rnd-loss-ignores-weights", "opiq_jax/parts/rnd.py",
           "return jnp.sum(errors * weights) / jnp.maximum(jnp.sum(weights), 1.0)", "return jnp.mean(errors)",
           "RND loss counts unstored rows", (BASE + "test_rnd_bonus_and_loss_by_hand",)),
    Mutant("bsp-prior-unscaled", "opiq_jax/parts/bsp.py",
           "return q_heads + beta_bsp * jax.lax.stop_gradient(prior_heads)",
           "return q_heads + jax.lax.stop_gradient(prior_heads)",
           "BSP prior added without beta_bsp", (BASE + "test_bsp_prior_stays_fixed_while_the_heads_learn",)),
    Mutant("bsp-prior-table-rows-shuffled", "opiq_jax/parts/bsp.py",
           "prior_heads = prior[PRIOR_TABLE][cells]", "prior_heads = prior[PRIOR_TABLE][cells[::-1]]",
           "BSP's prior table looked up in another row's cell", (PRIOR_TABLE_TEST,)),
    Mutant("bsp-loss-ignores-prior-table", "opiq_jax/trainer.py",
           'agent.head_values(run, params, batch.obs, agent.batch_cells(batch, "cells"))',
           "agent.head_values(run, params, batch.obs, None)",
           "the loss evaluates BSP's prior network instead of its table", (PRIOR_TABLE_TEST,)),
    Mutant("targets-ignore-prior-table", "opiq_jax/target_values.py",
           'batch.next_obs, agent.batch_cells(batch, "next_cells"))', "batch.next_obs, None)",
           "the targets evaluate BSP's prior network instead of its table", (PRIOR_TABLE_TEST,)),
    Mutant("target-table-ignores-prior-table", "opiq_jax/target_values.py",
           "agent.head_values(run, run.target_params, obs, cells)", "agent.head_values(run, run.target_params, obs, None)",
           "the target table evaluates BSP's prior network instead of its table", (PRIOR_TABLE_TEST,)),
    Mutant("bsp-torso-unscaled", "opiq_jax/parts/bsp.py",
           "scale_torso_gradients(grads, 1.0 / agent.num_heads)", "scale_torso_gradients(grads, 1.0)",
           "BSP torso gradients not divided by K", (V + "test_bsp_scales_the_shared_torsos_gradients_by_one_over_the_number_of_heads",)),
    # ------------------------------------------------------------------ trainer
    Mutant("trainer-epsilon-reversed", "opiq_jax/trainer.py",
           "return start + (end - start) * fraction", "return end + (start - end) * fraction",
           "epsilon schedule runs backwards", (PIECES + "test_linear_epsilon",)),
    Mutant("trainer-explore-inverted", "opiq_jax/trainer.py",
           "explore = jax.random.uniform(k_explore, (envs,)) < epsilon_at", "explore = jax.random.uniform(k_explore, (envs,)) > epsilon_at",
           "explores with probability 1 - epsilon", (ACTING,)),
    Mutant("trainer-counts-reset-steps", "opiq_jax/trainer.py",
           "decision.actions[e], ~outcome.first[e])", "decision.actions[e], True)",
           "EnvPool's reset steps are counted", (MONTEZUMA_COUNTS,)),
    Mutant("trainer-discount-gamma-once", "opiq_jax/trainer.py",
           "targets = partial[:, None] + discount[:, None] * values",
           "targets = partial[:, None] + agent.static.gamma * values",
           "n-step target bootstraps with gamma instead of gamma^L", (N_STEP_CHAIN,)),
    Mutant("trainer-no-mixed-monte-carlo", "opiq_jax/trainer.py",
           'mixed_monte_carlo(targets, batch.mc_return[:, None], hp["beta_mmc"])',
           'mixed_monte_carlo(targets, 0.0 * batch.mc_return[:, None], hp["beta_mmc"])',
           "Monte Carlo return left out of Montezuma's mixed target", (MONTEZUMA_TARGET,)),
    Mutant("trainer-qplus-metric-plain", "opiq_jax/trainer.py",
           '"qplus_start": jnp.max(q0 if bonus is None else q0 + bonus[0]),', '"qplus_start": jnp.max(q0),',
           "qplus_start reports plain Q", (ACTING,)),
    # ------------------------------------------------------------------ learning diagnostics (the pool path)
    Mutant("diagnostics-bonus-of-greedy-action", "opiq_jax/trainer.py",
           "jnp.take_along_axis(bonus, actions[:, None], axis=1)[:, 0]",
           "jnp.take_along_axis(bonus, greedy[:, None], axis=1)[:, 0]",
           "acted_bonus reports the greedy action's bonus, not the chosen one's",
           (DIAG + "test_bonuses_where_the_run_acted_by_recount",)),
    Mutant("diagnostics-td-max-of-invalid-rows", "opiq_jax/trainer.py",
           "td_max = jnp.max(jnp.where(valid[:, None], jnp.abs(q_taken - targets), 0.0))",
           "td_max = jnp.max(jnp.abs(q_taken - targets))",
           "td_error_max reads the rows the sampler could not fill",
           (DIAG + "test_largest_td_error_and_q_of_an_update_by_hand",)),
    Mutant("mmc-unfinished-rule-inverted", "opiq_jax/trainer.py",
           "targets = jnp.where(batch.mc_known[:, None], targets, n_step_only)",
           "targets = jnp.where(batch.mc_known[:, None], n_step_only, targets)",
           "mmc_unfinished n_step mixes the unknown returns and drops the known ones",
           (DIAG + "test_the_mixed_targets_rule_for_unfinished_episodes[n_step]",)),
    Mutant("frames-unknown-return-off-by-one", "opiq_jax/frame_replay.py",
           "return ages + 1 >= buffer.size - episode_steps", "return ages >= buffer.size - episode_steps",
           "the transition into the running episode's first stored step reads as known",
           (DIAG + "test_return_unknown_marks_only_the_running_episode",)),
    Mutant("probe-counts-colliding-codes", "opiq_jax/counts.py",
           "take = jnp.asarray(valid, bool) & (mine | ~probe.owned[slot])", "take = jnp.asarray(valid, bool)",
           "the probe counts every code that hashes to an owned slot as the owner",
           (DIAG + "test_the_probe_counts_exactly_the_codes_it_owns",)),
    Mutant("segment-blocks-out-of-order", "opiq_jax/frame_store.py",
           "data = pending.pop(0).result()", "data = pending.pop(-1).result()",
           "the segment writer appends its blocks in the order they were queued last-first",
           ("tests/test_segment_writer.py::test_blocks_written_by_any_number_of_threads_read_back_in_order[3]",)),
    Mutant("montezuma-lr-papers", "opiq_jax/environments.py",
           "MONTEZUMA_LR = 2.5e-4", "MONTEZUMA_LR = 5e-4",
           "Montezuma trains at the learning rate at which its Q-values diverged",
           ("tests/test_paper_settings.py::test_each_montezuma_method_has_the_written_settings[opiq]",)),
    # ------------------------------------------------------------------ the two observation paths
    Mutant("pool-stores-unclipped", "opiq_jax/paths/pool.py",
           'reward = self.frames.train_reward(outcome.reward) - run.hparams["reward_subtract"]',
           'reward = outcome.reward - run.hparams["reward_subtract"]',
           "Montezuma trains on unclipped rewards", (MONTEZUMA_CLIP,)),
    Mutant("pool-reports-clipped", "opiq_jax/paths/pool.py",
           "outcome = Outcome(obs=out.obs, reward=out.reward,", "outcome = Outcome(obs=out.obs, reward=clip_reward(out.reward),",
           "Montezuma reports clipped episode returns", (MONTEZUMA_CLIP,)),
    Mutant("pool-mc-undiscounted", "opiq_jax/paths/pool.py",
           "fill(m, self.static.gamma, self.episode_window, e)", "fill(m, 1.0, self.episode_window, e)",
           "Montezuma's Monte Carlo returns not discounted", (MONTEZUMA_TARGET,)),
    Mutant("pool-bootstrap-counts-of-start", "opiq_jax/paths/pool.py",
           "next_columns=lambda: columns(newest_frame(flat.next_obs)),", "next_columns=lambda: columns(newest_frame(flat.obs)),",
           "Montezuma's bootstrap bonus reads the start state's counts", (MONTEZUMA_TARGET,)),
    Mutant("pool-counts-oldest-frame", "opiq_jax/paths/pool.py",
           '"""``[E, 84, 84]``: the newest frames, which are counted."""\n        return newest_frame(env.obs)',
           '"""``[E, 84, 84]``: the newest frames, which are counted."""\n        return env.obs[:, 0]',
           "Montezuma counts the oldest frame of the stack", (MONTEZUMA_COUNTS,)),
    Mutant("compact-r-subtract-added", "opiq_jax/paths/compact.py",
           'reward=(outcome.reward[0] - run.hparams["reward_subtract"])', 'reward=(outcome.reward[0] + run.hparams["reward_subtract"])',
           "R-Subtract adds its constant", (BASE + "test_r_subtract_shifts_stored_rewards_only",)),
    Mutant("compact-bootstrap-from-first-step", "opiq_jax/paths/compact.py",
           "next_compact = jnp.take_along_axis(windows.next_compact, last[:, None, None], axis=1)[:, 0]",
           "next_compact = windows.next_compact[:, 0]",
           "n-step target bootstraps from the first step's next state", (N_STEP_CHAIN,)),
    # ------------------------------------------------------------------ results and resume
    Mutant("metrics-damaged-file-not-restored", "opiq_jax/metrics_file.py",
           "    if data is not None and record.covers(data):", "    if data is not None:",
           "a resume trains on after a metrics file that is short or changed (a gap)", (METRICS_RESTORED,)),
    Mutant("results-no-checksum", "opiq_jax/results.py",
           "if hashlib.sha256(data[:-32]).digest() != data[-32:]:", "if False:",
           "a damaged checkpoint is read as sound", (CHECKPOINTS,)),
    Mutant("results-previous-checkpoint-first", "opiq_jax/results.py",
           "for name in (CHECKPOINT_FILE, PREVIOUS_CHECKPOINT_FILE):", "for name in (PREVIOUS_CHECKPOINT_FILE, CHECKPOINT_FILE):",
           "resume prefers the older checkpoint", (CHECKPOINTS,)),
    Mutant("results-arrays-same-offset", "opiq_jax/results.py",
           "        offset += size\n", "",
           "every checkpoint array read from the first one's bytes", (CHECKPOINTS,)),
    Mutant("sweep-hparams-of-another-grid-point", "opiq_jax/sweeping.py",
           "            values = dict(zip(grid, (float(v) for v in combo)))\n"
           "            hp = method_hparams(preset.env, g[\"method\"], **values)",
           "            values = dict(zip(grid, (float(v) for v in combo)))\n"
           "            hp = method_hparams(preset.env, g[\"method\"], **dict(zip(grid, (float(v) for v in combo[::-1]))))",
           "a sweep's setting trains with another grid point's hyperparameters under its own label", (SWEEP_LABELS,)),
    Mutant("compact-bootstrap-counts-of-first-state", "opiq_jax/paths/compact.py",
           "                next_columns=lambda: columns(next_compact),",
           "                next_columns=lambda: columns(windows.compact[:, 0]),",
           "the optimistic bootstrap reads the counts of the window's first state, not the bootstrap state",
           (N_STEP_CHAIN,)),
    Mutant("trainer-target-copied-every-step", "opiq_jax/trainer.py",
           "    return (stored * agent.envs_per_run) % agent.static.target_update == 0",
           "    return stored >= 0",
           "the target network is copied at every step, not every target_update steps", (SCHEDULES,)),
    Mutant("runner-keeps-earlier-programs-on-device", "opiq_jax/programs.py",
           "            states[name] = jax.device_get(state) if keep_states else None",
           "            states[name] = state",
           "programs trained one after another keep the earlier ones' states on the device", (MEMORY_FREED,)),
    Mutant("metrics-keeps-stale-rows", "opiq_jax/metrics_file.py",
           "            atomic_write_bytes(path, data[: record.size])", "            pass",
           "resume keeps the rows of a chunk written after the checkpoint", (RESUME,)),
    Mutant("programs-check-memory-again", "opiq_jax/programs.py",
           "    out, groups = Path(out), experiment.programs\n",
           "    out, groups = Path(out), experiment.programs\n"
           "    require_fits(state_bytes_per_run(experiment.static), len(experiment.runs))\n",
           "the programs check the memory that the plan checked", (CHECKED_ONCE,)),
    Mutant("reading-imports-the-programs", "opiq_jax/reading.py",
           "from .config import StaticConfig\n", "from .config import StaticConfig\nfrom .programs import run_methods\n",
           "a low module imports one above it (a circle through the host layer)", (LAYERS,)),
    # ------------------------------------------------------------------ frame rings saved as what changed
    Mutant("frames-keep-overwritten-segments", "opiq_jax/frame_store.py",
           "        if np.any(later < capacity):", "        if True:",
           "a checkpoint keeps listing segments every ring has overwritten", (FRAMES + "test_a_checkpoint_writes_the_new_frames_only_and_restores_the_same_state",)),
    Mutant("frames-whole-rings-always", "opiq_jax/frame_store.py",
           "    if bound >= capacity:", "    if True:",
           "every checkpoint writes the whole rings again", (FRAMES + "test_the_frames_a_chunk_writes_are_bounded_by_its_steps",)),
    Mutant("frames-unchecked-segment", "opiq_jax/frame_store.py",
           "    if data[-32:] != hashlib.sha256(data[:-32]).digest() or data[-32:].hex() != segment.sha256:", "    if False:",
           "a damaged segment is read as sound", (FRAMES + "test_a_damaged_segment_falls_back_to_the_checkpoint_before",)),
    Mutant("frames-restore-unordered", "opiq_jax/frame_store.py",
           "    for segment in segments:\n        frames = read_segment(", "    for segment in segments[::-1]:\n        frames = read_segment(",
           "restoring writes older segments over newer ones", (FRAMES + "test_a_checkpoint_with_its_rings_inline_loads_and_the_next_writes_them_whole",)),
    # ------------------------------------------------------------------ any Atari game on the pool path
    Mutant("atari-rooms-everywhere", "opiq_jax/paths/pool.py",
           '{"rooms_visited": frames.num_rooms} if frames.num_rooms else {}', '{"rooms_visited": NUM_ROOMS}',
           "a game without rooms records rooms_visited", (ATARI + "test_rooms_visited_is_recorded_only_where_the_game_defines_rooms",)),
    Mutant("atari-counts-montezumas-feature", "opiq_jax/paths/pool.py",
           "        return self.frames.count_code(frame)\n", "        return counts.montezuma_code(frame)\n",
           "the pool path counts Montezuma's feature whatever the spec says", (ATARI + "test_the_counts_are_of_the_code_the_spec_says",)),
    Mutant("pools-seeded-alike", "opiq_jax/runner.py",
           "return [seed + d * per_pool for d in range(count)]", "return [seed + d for d in range(count)]",
           "the pools of several devices repeat each other's seeds", (POOLS + "test_each_pool_is_seeded_so_that_every_environment_gets_the_seed_one_pool_would_give_it",)),
    Mutant("pools-all-step-the-first", "envs/atari.py",
           "jax.lax.switch(jax.lax.axis_index(self.axis), branches, *args)", "jax.lax.switch(0, branches, *args)",
           "every device steps the first device's pool", (POOLS + "test_two_devices_each_step_their_own_pool_and_train_as_one_device_does",)),
    Mutant("runner-deletes-uncovered-metrics", "opiq_jax/runner.py",
           "            set_aside_uncovered(path, say)", "            pass",
           "a run whose checkpoints are gone deletes its metrics", (METRICS_KEPT,)),
    # ------------------------------------------------------------------ packed storage and the lean backward pass
    Mutant("packed-accumulator-of-absolute-gradients", "opiq_jax/packed_state.py",
           "(1.0 - static.rms_decay) * jnp.square(g)", "(1.0 - static.rms_decay) * jnp.abs(g)",
           "packed RMSProp accumulates |g| instead of g^2", (PACKED + "test_rmsprop_step_is_the_optimisers_step_up_to_storage_rounding",)),
    Mutant("packed-unpack-drops-the-low-byte", "opiq_jax/packed_state.py",
           "bits = (high_bits << 16) + ((low.astype(jnp.uint32) << 8) | jnp.uint32(LOW_FILL)) - jnp.uint32(HALF)",
           "bits = high_bits << 16",
           "the master weight is read from the bfloat16 copy alone", (PACKED + "test_pack_keeps_24_bits_and_unpack_is_exact",)),
    Mutant("lean-kernel-forgets-the-relu", "opiq_jax/mlp_backward.py",
           "stored = _transposed_product(jnp.maximum(x, 0) if relu else x, g)", "stored = _transposed_product(x, g)",
           "the kernel's weight gradient reads the layer's input before its ReLU", (LEAN + "test_kernel_writes_xlas_weight_gradient_and_its_square_sum",)),
    Mutant("lean-input-gradient-ignores-the-relu", "opiq_jax/mlp_backward.py",
           "        dx = jnp.where(x > 0, dx, jnp.zeros_like(dx))", "        dx = dx",
           "the lean pass sends gradient back through inactive ReLUs", (LEAN + "test_lean_mlp_has_the_same_weights_forward_and_gradients",)),
    Mutant("lean-square-sums-counted-twice", "opiq_jax/mlp_backward.py",
           "        if path not in known:", "        if True:",
           "the clip's norm counts the kernels' square sums and their gradients both", (LEAN + "test_square_sum_total_adds_the_known_sums_and_the_other_leaves",)),
    # ------------------------------------------------------------------ devices, parallel programs, envs per run
    Mutant("sharding-refuses-runs-that-divide", "opiq_jax/devices.py",
           "    if num_runs % len(devices):", "    if num_runs % len(devices) == 0:",
           "runs that divide over the devices stay on one", (SHARDED_TEST,)),
    Mutant("sharding-runs-replicated", "opiq_jax/devices.py",
           "runs=jax.tree.map(lambda x: jax.device_put(x, by_run), state.runs),",
           "runs=jax.tree.map(lambda x: jax.device_put(x, replicated), state.runs),",
           "every device holds every run instead of its share", (SHARDED_TEST,)),
    Mutant("programs-stopped-reported-failed", "opiq_jax/program_processes.py",
           "c not in (0, EXIT_NONFINITE, EXIT_USAGE) and n not in stopped}", "c not in (0, EXIT_NONFINITE, EXIT_USAGE)}",
           "a program stopped on request counts as failed", ("tests/test_program_processes.py::test_exit_codes_become_one_error",)),
    Mutant("epsilon-counts-scan-steps", "opiq_jax/trainer.py",
           "return linear_epsilon(step * agent.envs_per_run,", "return linear_epsilon(step,",
           "epsilon decays per vectorised step, not per environment step", (ENVS_PER_RUN,)),
    Mutant("target-copy-counts-scan-steps", "opiq_jax/trainer.py",
           "return (stored * agent.envs_per_run) % agent.static.target_update == 0",
           "return stored % agent.static.target_update == 0",
           "the target copy is due per vectorised step, not per environment step", (ENVS_PER_RUN,)),
    Mutant("updates-ignore-envs-per-run", "opiq_jax/trainer.py",
           "iterations_per_update = max(1, static.train_every // envs)", "iterations_per_update = max(1, static.train_every)",
           "one update per train_every vectorised steps, whatever the environments per run", (ENVS_PER_RUN,)),
    Mutant("bench-agent-chunk-jitted", "experiments/montezuma_bench.py",
           "chunk = chunk_program(trainer.train_chunk, state).lower(state).compile()",
           "chunk = chunk_program(trainer.train_chunk, state)",
           "the Montezuma agent's timed chunk recompiles on one device (the bug found in its rates)",
           ("tests/test_montezuma_bench.py::test_the_agents_timed_chunk_compiles_nothing",)),
    Mutant("plain-bootstrap-current-cell", "opiq_jax/benchmark/plain.py",
           "static.gamma, run.replay.cell, run.replay.next_cell)", "static.gamma, run.replay.cell, run.replay.cell)",
           "the plain baseline bootstraps with the counts of the window's first cells, not the next ones",
           ("tests/test_bench.py::test_plain_targets_by_hand_bootstrap_from_the_next_cells_counts",)),
    Mutant("plain-walk-past-episode-end", "opiq_jax/benchmark/plain.py",
           "alive = use & ~replay.done[position]", "alive = use",
           "the plain baselines' n-step walk runs on past the end of an episode",
           ("tests/test_bench.py::test_plain_targets_by_hand_bootstrap_from_the_next_cells_counts",
            "tests/test_plain_atari.py::test_targets_sum_n_rewards_with_bonuses_and_bootstrap_from_q_plus")),
    Mutant("bench-timer-ignores-compiles", "opiq_jax/benchmark/throughput.py",
           "        compiles += made\n", "        compiles += 0\n",
           "the bench's timers stop counting the compiles inside their timed intervals",
           ("tests/test_bench.py::test_timed_repeats_counts_the_compiles_inside_its_intervals",)),
)

CHEAP: tuple[str, ...] = (
    "counts-query-max", "counts-update-ignores-valid", "counts-simhash-sign", "optimism-no-plus-one",
    "targets-window-includes-after-end", "targets-discount-power", "targets-mmc-no-weight", "targets-max-split",
    "pseudocounts-one-over-n", "replay-position-clamped", "dora-log-one-minus-e", "rnd-bonus-mean",
    "bsp-torso-unscaled", "trainer-epsilon-reversed", "results-no-checksum", "results-arrays-same-offset",
    "bench-timer-ignores-compiles", "frames-unknown-return-off-by-one", "probe-counts-colliding-codes",
)
"""Mutants whose tests take a few seconds (pure functions, no compiled trainer): what the CI sample draws from."""

__all__ = ["CHEAP", "MUTANTS", "Mutant"]
