"""The paper's methods as hyperparameter settings of one program.

Most methods of the paper differ only in numbers: epsilon-greedy DQN, DQN + PC, R-Subtract, Bias,
OPIQ and its two ablations are the same compiled program with different :class:`HParams`, so a
figure with all of them is one vmap over a runs axis (method x setting x seed).

``method_hparams(env, method)`` returns the paper's best setting of ``method`` on ``env`` (appendix,
"The best hyperparameters we found were"). Where the paper gives no best value for a variant we
use the nearest one it gives and say so in ``NOTES``.
"""

from __future__ import annotations

from .config import ENV_EPSILON, HParams, env_family, make_hparams

METHOD_DESCRIPTIONS: dict[str, str] = {
    "dqn": "epsilon-greedy DQN (epsilon decayed linearly from 1 to 0.01)",
    "dqn_pc": "DQN + pseudocount intrinsic reward beta/sqrt(N)",
    "dqn_rsubtract": "DQN with a constant subtracted from every environment reward",
    "dqn_rsubtract_pc": "DQN R-Subtract + pseudocounts",
    "dqn_bias": "DQN with the output layer's bias initialised optimistically",
    "dqn_bias_pc": "DQN Bias + pseudocounts",
    "opiq": "OPIQ: Q+ for action selection and bootstrapping, plus pseudocounts",
    "opiq_no_ob": "OPIQ without optimistic bootstrapping (Q+ for acting only)",
    "opiq_no_pc": "OPIQ without pseudocount intrinsic reward",
}

# The paper's best settings per environment; the epsilon of each environment is added below.
_BEST: dict[str, dict[str, dict[str, float]]] = {
    "chain": {
        "dqn": dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=100.0),
        "dqn_pc": dict(beta=0.1),
        "dqn_rsubtract": dict(reward_subtract=1.0),
        "dqn_rsubtract_pc": dict(reward_subtract=1.0, beta=0.1),
        "dqn_bias": dict(final_bias=1.0),
        "dqn_bias_pc": dict(final_bias=1.0, beta=0.1),
        "opiq": dict(m=0.5, c_action=1.0, c_bootstrap=1.0, beta=0.1),
        "opiq_no_ob": dict(m=2.0, c_action=10.0, beta=0.1),
        "opiq_no_pc": dict(m=2.0, c_action=10.0, c_bootstrap=10.0),
    },
    "maze": {
        "dqn": dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=100_000.0),
        "dqn_pc": dict(beta=0.1),
        "dqn_rsubtract": dict(reward_subtract=0.1),
        "dqn_rsubtract_pc": dict(reward_subtract=0.1, beta=0.1),
        "dqn_bias": dict(final_bias=1.0),
        "dqn_bias_pc": dict(final_bias=1.0, beta=0.1),
        "opiq": dict(m=2.0, c_action=100.0, c_bootstrap=0.01, beta=0.1),
        "opiq_no_ob": dict(m=2.0, c_action=100.0, beta=0.1),
        "opiq_no_pc": dict(m=2.0, c_action=100.0, c_bootstrap=0.1),
    },
}

NOTES = {
    "dqn_rsubtract_pc": "chain: the paper's best R-Subtract setting (subtract 1) is without PC; "
    "the +PC variant uses the same constant with beta 0.1.",
    "dqn_bias": "chain: the paper's best Bias setting (bias 1) is with PC; the variant without PC uses bias 1 too.",
    "dqn_rsubtract": "maze: the paper runs R-Subtract and Bias only with PC; the variants without PC use the same constants.",
}

METHODS = tuple(METHOD_DESCRIPTIONS)


def method_settings(env: str, method: str) -> dict[str, float]:
    """The paper's best hyperparameters of ``method`` on ``env`` as a plain dict.

    A ``gymnax:NAME`` environment gets the chain's settings (the paper has none for it).
    """
    env = "chain" if env_family(env) == "gymnax" else env
    if env not in _BEST:
        raise ValueError(f"unknown env {env!r}: use one of {', '.join(_BEST)}")
    if method not in _BEST[env]:
        raise ValueError(f"unknown method {method!r}: use one of {', '.join(METHODS)}")
    settings = {**ENV_EPSILON[env], **_BEST[env][method]}
    return settings


def method_hparams(env: str, method: str, **overrides: float) -> HParams:
    """The paper's best setting of ``method`` on ``env``, with ``overrides`` applied."""
    return make_hparams(**{**method_settings(env, method), **overrides})
