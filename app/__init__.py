"""gicbench: dissect GPU-initiated and CPU-proxy RDMA communication.

The package is layered top to bottom as the data flows (see DESIGN.md in the repository):
cli -> experiments -> submit -> fabric -> bootstrap, with trace and analysis beside them.
"""

__version__ = "0.1.0"
