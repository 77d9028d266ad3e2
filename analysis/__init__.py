"""Offline analysis of gicbench runs: load traces, aggregate ranks, fit, report."""
