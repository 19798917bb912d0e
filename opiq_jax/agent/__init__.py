"""The agent: the trainer (one compiled program of acting, counting, replay and the update) and the strategies it
is built with, chosen once: how the weights are kept, where the targets' bootstrap values come from, the backward
pass."""
