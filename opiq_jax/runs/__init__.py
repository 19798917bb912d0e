"""An experiment: its runs, their keys and programs, the compiled trainers and chunks, the device memory they need,
and a results folder read back."""
