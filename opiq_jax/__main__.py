"""``python -m opiq_jax``: the ``opiq-jax`` command (:mod:`opiq_jax.launch`)."""

from .launch import main

main()
