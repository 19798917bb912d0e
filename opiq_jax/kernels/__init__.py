"""Pallas kernels for the GPU: the maze network's convolutions and the MLP's lean backward pass. Each has an XLA
twin that the CPU and the tests use."""
