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
    "dqn_dora": "DQN + DORA: generalised counts from an E-value network as intrinsic reward",
    "dqn_dora_oa": "DQN + DORA OA: DORA's bonus also added to Q for action selection",
    "dqn_rnd": "DQN + RND: random network distillation error as intrinsic reward",
    "bsp": "Bootstrapped DQN with randomised prior functions (K heads, a head per episode)",
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
        "dqn_dora": dict(beta_dora=0.01),
        "dqn_dora_oa": dict(beta_dora=0.01, beta_dora_action=0.1),
        "dqn_rnd": dict(beta_rnd=10.0),
        "bsp": dict(beta_bsp=100.0),
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
        "dqn_dora": dict(beta_dora=0.01),
        "dqn_dora_oa": dict(beta_dora=0.01, beta_dora_action=0.1),
        "dqn_rnd": dict(beta_rnd=10.0),
        "bsp": dict(beta_bsp=100.0),
        "opiq": dict(m=2.0, c_action=100.0, c_bootstrap=0.01, beta=0.1),
        "opiq_no_ob": dict(m=2.0, c_action=100.0, beta=0.1),
        "opiq_no_pc": dict(m=2.0, c_action=100.0, c_bootstrap=0.1),
    },
    # Montezuma: the count-based methods only (the paper's DORA, RND and BSP there are not implemented).
    "montezuma": {
        "dqn": dict(),
        "dqn_pc": dict(beta=0.01, beta_mmc=0.01),
        "opiq": dict(m=2.0, c_action=0.1, c_bootstrap=0.01, beta=0.01, beta_mmc=0.01),
        "opiq_no_ob": dict(m=2.0, c_action=0.1, beta=0.01, beta_mmc=0.005),
        "opiq_no_pc": dict(m=2.0, c_action=0.1, c_bootstrap=0.01, beta_mmc=0.01),
    },
}

NOTES = {
    "dqn_rsubtract_pc": "chain: the paper's best R-Subtract setting (subtract 1) is without PC; "
    "the +PC variant uses the same constant with beta 0.1.",
    "dqn_bias": "chain: the paper's best Bias setting (bias 1) is with PC; the variant without PC uses bias 1 too.",
    "dqn_rsubtract": "maze: the paper runs R-Subtract and Bias only with PC; the variants without PC use the same constants.",
    "dqn_dora": "chain: the paper gives DORA, RND and BSP settings for the maze only; the chain uses the maze's.",
    "dqn": "montezuma: the paper gives no epsilon-greedy DQN setting there; it uses the common epsilon schedule "
    "(1 to 0.01 over 1M steps) without MMC.",
    "opiq_no_pc": "montezuma: the paper gives no best setting for OPIQ w/o PC there; it uses OPIQ's without beta.",
}

# Methods that need networks of their own: static (structural) options of the one trainer.
METHOD_STRUCTURE: dict[str, dict[str, object]] = {
    "dqn_dora": dict(bonus_network="dora"),
    "dqn_dora_oa": dict(bonus_network="dora"),
    "dqn_rnd": dict(bonus_network="rnd"),
    "bsp": dict(bsp_heads=10),
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
        if method in METHODS:
            raise ValueError(f"{method} is not available on {env}: use one of {', '.join(_BEST[env])}")
        raise ValueError(f"unknown method {method!r}: use one of {', '.join(METHODS)}")
    settings = {**ENV_EPSILON[env], **_BEST[env][method]}
    return settings


def method_structure(method: str, bsp_heads: int = 10) -> tuple[str, dict[str, object]]:
    """The program ``method`` runs in: its name (``plain``, ``dora``, ``rnd``, ``bsp``) and its structural
    static options. Names outside ``METHODS`` (a relabelled setting, for example) run in the plain program."""
    structure = {"bonus_network": "none", "bsp_heads": 0, **METHOD_STRUCTURE.get(method, {})}
    if structure["bsp_heads"]:
        return "bsp", {**structure, "bsp_heads": bsp_heads}
    return ("plain" if structure["bonus_network"] == "none" else str(structure["bonus_network"])), structure


def method_hparams(env: str, method: str, **overrides: float) -> HParams:
    """The paper's best setting of ``method`` on ``env``, with ``overrides`` applied."""
    return make_hparams(**{**method_settings(env, method), **overrides})
