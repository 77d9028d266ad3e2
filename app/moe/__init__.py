"""Mixture-of-experts token dispatch: routing, landing layout and validation (arXiv 2611.12362)."""
