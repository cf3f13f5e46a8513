"""``ray.train.data_parallel_trainer``: DataParallelTrainer, as ``lockstep.train`` has it.

Example:
    >>> from lockstep.train.data_parallel_trainer import DataParallelTrainer
    >>> from lockstep import train
    >>> DataParallelTrainer is train.DataParallelTrainer
    True
"""

from lockstep.train._trainer import DataParallelTrainer

__all__ = ["DataParallelTrainer"]
