"""experiments/profile_step.py: the device time of the compiled trainer, split by the trainer's named scopes."""

import pytest

from experiments.profile_step import (
    markdown,
    op_names_of,
    phase_of,
    phase_totals,
    profile_trainer,
)
from opiq_jax.registry.environments import static_for_env


def test_phase_of_reads_the_trainers_scopes_from_a_name_stack():
    stack = "jit(train_chunk)/while/body/closed_call/update/cond/branch_1_fun/vmap(optimiser)/reduce_sum"
    assert phase_of(stack) == "update/optimiser"
    assert phase_of("jit(train_chunk)/while/body/closed_call/act/vmap()/argmax") == "act"
    assert phase_of("jit(train_chunk)/while/body/update/vmap(sample_windows)/gather") == "update"
    assert phase_of("") == "other"


def test_op_names_of_compiled_hlo_text():
    text = ('  %fusion.3 = f32[4]{0} fusion(f32[4]{0} %p), kind=kLoop, calls=%fused, '
            'metadata={op_name="jit(f)/act/add" source_file="x.py"}\n'
            '  ROOT dot.2 = f32[2]{0} dot(a, b), metadata={op_name="jit(f)/update/dot_general"}\n')
    assert op_names_of(text) == {"fusion.3": "jit(f)/act/add", "dot.2": "jit(f)/update/dot_general"}


def test_phase_totals_of_ops_with_known_times():
    """Four ops of known durations: one in acting, two in the loss's scope, one without a name."""
    per_op = {"fusion.1": 0.25, "dot.2": 0.5, "add.3": 0.125, "copy.4": 1.0}
    names = {"fusion.1": "jit(train_chunk)/while/body/closed_call/act/vmap()/argmax",
             "dot.2": "jit(train_chunk)/while/body/update/cond/branch_1_fun/vmap(loss_and_grad)/dot_general",
             "add.3": "jit(train_chunk)/while/body/update/loss_and_grad/add"}
    phases, per_phase = phase_totals(per_op, names)
    assert phases == {"fusion.1": "act", "dot.2": "update/loss_and_grad", "add.3": "update/loss_and_grad",
                      "copy.4": "other"}
    assert per_phase == {"act": 0.25, "update/loss_and_grad": 0.625, "other": 1.0}


@pytest.mark.parametrize("storage", [{}, {"precision": "bfloat16", "weight_storage": "packed"}])
def test_profile_of_a_small_chain_covers_every_phase_of_a_learning_step(storage):
    """(Packed storage's unpacking, step and rounding all count as the optimiser's.)"""
    static = static_for_env("chain", chain_length=8, total_steps=200, log_every=100, buffer_size=300, hidden=(16,),
                            count_features="exact", **storage)
    result = profile_trainer(static, num_runs=2, chunks=1)
    phases = result["per_phase"]
    for phase in ("act", "update/sample", "update/targets", "update/loss_and_grad", "update/optimiser"):
        assert phases.get(phase, 0.0) > 0.0, (phase, phases)
    assert result["op_seconds"] > 0 and all(op["seconds"] > 0 for op in result["per_op"])
    assert result["steps"] == 2 * 100
    assert "| update/loss_and_grad |" in markdown(result, top=5)


def test_command_buffers_are_read_from_xla_flags(monkeypatch):
    from experiments.profile_step import command_buffers_enabled

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert command_buffers_enabled()
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x --xla_gpu_enable_command_buffer=")
    assert not command_buffers_enabled()
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_command_buffer= --xla_gpu_enable_command_buffer=FUSION")
    assert command_buffers_enabled()
