"""Stoppers for ``RunConfig(stop=...)``; the same names as ``ray.tune.stopper``."""

from lockstep.tune._stopper import MaximumIterationStopper, Stopper

__all__ = ["MaximumIterationStopper", "Stopper"]
