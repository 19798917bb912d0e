"""The results store: files written atomically, checkpoints and their frame segments, the metrics file."""
