"""Throughput benchmark of the compiled trainer against a plain, clarity-first baseline.

* :mod:`opiq_jax.benchmark.plain`: a straightforward vmapped, jitted DQN with count bonuses (OPIQ's Q+
  for acting and bootstrapping, ``beta / sqrt(N)`` intrinsic reward), stepped once per Python call.
  It is the yardstick, kept apart from the trainer and written for clarity rather than speed.
* :mod:`opiq_jax.benchmark.plain_atari`: its form on Montezuma's Revenge (one EnvPool pool, the Nature network,
  a hashed count table of the paper's frame feature, a replay of whole transitions), which
  ``experiments/bench/throughput_table.py`` times.
* :mod:`opiq_jax.benchmark.throughput`: measures both side by side (environment steps per second,
  compile time, memory, a work model of bytes and FLOPs per step, the fractions of the card's
  measured bandwidth and compute) and writes a JSON file and a Markdown table.
"""
