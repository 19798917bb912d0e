"""The agent's pieces as pure functions and arrays: visit counts, replay rings, n-step and mixed Monte Carlo
targets, the Q-networks, the packed weight storage, and what a run carries."""
