"""Checks of the project itself: mutation testing, program identity across revisions, the behaviour check, the
results index, before/after learning curves, a time-boxed run for a lease, and a sweep's last step."""
