"""mini-proxy: producers (host threads, or GPU threads over mapped host rings) fill rings of
16-byte descriptors; pinned CPU workers post chains of RDMA writes (proxy/src/proxy_*.cpp)."""

from .submitter import ProxySubmitter

__all__ = ["ProxySubmitter"]
