"""Offline analysis of gicbench runs: load traces, aggregate ranks, fit, report.

load.load_run / load.aggregate_ranks   tidy pandas tables from a run directory
fits                                   the papers' fits and models
cli                                    `gicbench analyze` and `gicbench report`
Plotting (matplotlib) is imported only by the report, so loading and fitting stay light.
"""
