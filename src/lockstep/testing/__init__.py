"""Fault injection for testing a run's recovery, and every rank's return value, in
lockstep's tests and in yours."""

from lockstep.testing._faults import Fault, InjectedFailure, train_epochs
from lockstep.testing._ranks import fit_all_ranks

__all__ = ["Fault", "InjectedFailure", "fit_all_ranks", "train_epochs"]
