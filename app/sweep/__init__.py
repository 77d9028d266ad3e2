"""Sweeps: a TOML file of axes over `gicbench run`'s parameters, run point by point into one sweep
directory, resumable across Slurm submissions.

    SWEEP_DIR/sweep.json           the manifest: the sweep, every point and its status (atomic)
    SWEEP_DIR/points/003-<slug>/   one `gicbench run` directory per point
    SWEEP_DIR/aside/...            earlier attempts of redone points, moved aside (never deleted)

`point_runs(sweep_dir)` is what the analysis calls to treat the finished points as one run.
"""

from __future__ import annotations

from .manifest import is_sweep, load_manifest, point_runs
from .spec import Point, SweepSpec, load_spec, parse_spec_text

__all__ = [
    "Point",
    "SweepSpec",
    "is_sweep",
    "load_manifest",
    "load_spec",
    "parse_spec_text",
    "point_runs",
]
