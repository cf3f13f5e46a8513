"""Fault injection for testing a run's recovery, and every rank's return value, in
lockstep's tests and in yours."""

from lockstep.testing._equivalence import assert_resume_equivalent
from lockstep.testing._faults import Fault, InjectedFailure, fired_faults, train_epochs
from lockstep.testing._ranks import fit_all_ranks

__all__ = [
    "Fault",
    "InjectedFailure",
    "assert_resume_equivalent",
    "fired_faults",
    "fit_all_ranks",
    "train_epochs",
]
