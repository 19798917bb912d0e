"""Reporting: statistics across seeds (IQM, bootstrap intervals), the figures and tables, live tracking."""
