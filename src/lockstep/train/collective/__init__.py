"""Collective operations across the workers of a run, usable with any framework."""

from lockstep.train._collective import barrier, broadcast_from_rank_zero

__all__ = ["barrier", "broadcast_from_rank_zero"]
