"""Fault injection for testing a run's recovery, in lockstep's tests and in yours."""

from lockstep.testing._faults import Fault, InjectedFailure, train_epochs

__all__ = ["Fault", "InjectedFailure", "train_epochs"]
