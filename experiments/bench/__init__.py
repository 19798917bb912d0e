"""Benchmarks of speed and size: the throughput table, Montezuma's rates on one or several GPUs, the frame
segment writer and the checkpoints' share of a run, the install size, and the authors' own code."""
