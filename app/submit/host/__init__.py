"""The host submitter: CPU threads post WQEs and poll CQEs directly (native loops), or through
post_send on a provider without mlx5 queues in memory (post_send.py)."""

from .submitter import HostSubmitter, max_batch, write_wqebbs

__all__ = ["HostSubmitter", "max_batch", "write_wqebbs"]
