"""Studies beyond the paper: DeepSea's scaling, the other hard-exploration Atari games, SimHash aliasing, and
Montezuma's learner (its divergence, its unknown Monte Carlo returns)."""
