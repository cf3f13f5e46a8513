"""DatasetPipeline: a dataset repeated over epochs (the older ``repeat()`` API).

Ray Train material written for Ray 1.x passes ``ds.repeat().random_shuffle_each_window()``
to a trainer and reads ``get_dataset_shard(name).iter_epochs()`` in the workers; this class
keeps that code working. The trainer splits the pipeline like a dataset; each worker then
reshuffles its own shard at every epoch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from lockstep.data._iterable import BatchIterable
from lockstep.data._plan import Plan
from lockstep.data._split import check_num_splits

D = TypeVar("D")


class DatasetPipeline(BatchIterable, Generic[D]):
    """``times`` epochs of a dataset (forever when None), optionally reshuffled each epoch.

    Iterating it (``iter_batches``, ``to_torch``, ...) goes through every epoch in turn;
    ``iter_epochs()`` gives one Dataset per epoch.

    Example:
        >>> import lockstep.data as ld
        >>> pipe = ld.range(3).repeat(2)
        >>> [b["id"].tolist() for b in pipe.iter_batches(batch_size=3)]
        [[0, 1, 2], [0, 1, 2]]
    """

    def __init__(
        self,
        plan: Plan,
        wrap: Callable[[Plan], D],
        *,
        times: int | None = None,
        shuffle: bool = False,
        seed: int | None = None,
    ) -> None:
        if times is not None and (not isinstance(times, int) or times < 0):
            raise ValueError(f"repeat(times) takes a non-negative int or None, got {times!r}")
        self._plan = plan
        self._wrap = wrap  # the public dataset class, for iter_epochs()
        self._times = times
        self._shuffle = shuffle
        self._seed = seed
        self._last_stats = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its description: the stats of the last pass stay behind.
        rebuild = functools.partial(
            DatasetPipeline, times=self._times, shuffle=self._shuffle, seed=self._seed
        )
        return rebuild, (self._plan, self._wrap)

    def random_shuffle_each_window(self, *, seed: int | None = None) -> DatasetPipeline[D]:
        """Shuffle the rows anew at each epoch (with ``seed + epoch`` when a seed is given).

        After a split, each worker shuffles its own shard, in memory.

        Example:
            >>> import lockstep.data as ld
            >>> pipe = ld.range(4).repeat(2).random_shuffle_each_window(seed=1)
            >>> [sorted(r["id"] for r in epoch.take_all()) for epoch in pipe.iter_epochs()]
            [[0, 1, 2, 3], [0, 1, 2, 3]]
        """
        return DatasetPipeline(self._plan, self._wrap, times=self._times, shuffle=True, seed=seed)

    def iter_epochs(self, max_epoch: int = -1) -> Iterator[D]:
        """One Dataset per epoch, until ``times`` (or ``max_epoch`` when >= 0) epochs.

        Example:
            >>> import lockstep.data as ld
            >>> [epoch.count() for epoch in ld.range(2).repeat().iter_epochs(max_epoch=3)]
            [2, 2, 2]
        """
        epoch = 0
        while (self._times is None or epoch < self._times) and (max_epoch < 0 or epoch < max_epoch):
            yield self._wrap(self._epoch(epoch))
            epoch += 1

    def _epochs(self) -> Iterator[Plan]:
        epoch = 0
        while self._times is None or epoch < self._times:
            yield self._epoch(epoch)
            epoch += 1

    def _epoch(self, epoch: int) -> Plan:
        if not self._shuffle:
            return self._plan
        return self._plan.shuffled(None if self._seed is None else self._seed + epoch)

    def _pass_blocks(self) -> Iterator[Any]:
        for plan in self._epochs():
            yield from plan.blocks()

    def split(
        self, n: int, *, equal: bool = False, locality_hints: Any = None
    ) -> list[DatasetPipeline[D]]:
        """``n`` pipelines over disjoint parts of the dataset (see ``Dataset.split``).

        Example:
            >>> import lockstep.data as ld
            >>> parts = ld.range(4).repeat(2).split(2, equal=True)
            >>> [[e.count() for e in p.iter_epochs()] for p in parts]
            [[2, 2], [2, 2]]
        """
        check_num_splits(n, "split")
        return [
            DatasetPipeline(
                part, self._wrap, times=self._times, shuffle=self._shuffle, seed=self._seed
            )
            for part in self._plan.split(n, equal)
        ]

    def __repr__(self) -> str:
        times = "forever" if self._times is None else f"{self._times} epochs"
        shuffled = ", reshuffled each epoch" if self._shuffle else ""
        return f"DatasetPipeline({self._plan.describe()}, {times}{shuffled})"
