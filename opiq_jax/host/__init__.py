"""Running an experiment: the plan (a request checked and turned into an Experiment), the host loop, programs in
processes of their own, sweeps and their presets, several hosts, stop signals."""
