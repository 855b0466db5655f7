"""STAND-IN for mooncake.engine."""


class TransferEngine:
    """Stand-in: the real one registers memory and moves KV blocks over RDMA."""
