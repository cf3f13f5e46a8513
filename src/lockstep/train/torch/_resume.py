"""The sampler ``prepare_data_loader`` adds: a ``DistributedSampler`` that keeps its place.

Its position (kept with every checkpoint, in the checkpoint's metadata) is the epoch
(``set_epoch``), how many of this pass's indices the loader handed out in batches, and
whether the pass ended. The indices of a pass are a function of the dataset's length, the
seed, the epoch and the ranks (as ``DistributedSampler`` draws them), so the position
names no index itself. A pass that continues an interrupted one carries the positions it
continues (``"base"``): the indices no rank had handed out, split again among the workers.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader, DistributedSampler

from lockstep._core import data_wait

_SAME = ("len", "seed", "shuffle", "drop_last")  # what a restart must keep to continue


def pass_indices(position: dict[str, Any]) -> list[int]:
    """The indices, in order, of the pass ``position`` describes."""
    base = position.get("base")
    if base:
        return remaining(base, position["world"], position["rank"])
    sampler: DistributedSampler[Any] = DistributedSampler(
        range(position["len"]),  # type: ignore[arg-type]  # only its length is used
        num_replicas=position["world"],
        rank=position["rank"],
        shuffle=position["shuffle"],
        seed=position["seed"],
        drop_last=position["drop_last"],
    )
    sampler.set_epoch(position["epoch"])
    return list(sampler)


def remaining(positions: Sequence[dict[str, Any]], world: int, rank: int) -> list[int]:
    """Rank ``rank``'s part (of ``world``) of the indices no rank of ``positions`` handed
    out: the same rank's own rest when the number of workers is the same, else every
    rank's rest, dealt out in turn."""
    if len(positions) == world:
        own = positions[rank]
        return [] if own["ended"] else pass_indices(own)[own["consumed"] :]
    left = [
        index for p in positions if not p["ended"] for index in pass_indices(p)[p["consumed"] :]
    ]
    return left[rank::world]


class ResumableSampler(DistributedSampler):  # type: ignore[type-arg]
    """A ``DistributedSampler`` whose first pass after a restart continues the checkpoint's.

    Args:
        saved: Every old rank's position of this loader, from the checkpoint; None when
            starting afresh.
        auto_epoch: Count the epoch up at every pass unless ``set_epoch`` is called (one
            worker, replacing a ``RandomSampler``, which gives a new order at every pass).
    """

    def __init__(
        self,
        dataset: Any,
        *,
        num_replicas: int,
        rank: int,
        shuffle: bool,
        seed: int,
        saved: list[dict[str, Any]] | None = None,
        auto_epoch: bool = False,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self._auto_epoch = auto_epoch
        self._epoch_given = False
        self._passes = 0
        self._indices: list[int] | None = None
        self._base: list[dict[str, Any]] | None = None
        self.consumed = 0
        self.ended = False
        self._saved = self._usable(saved)
        if self._saved is not None:
            first = self._saved[0]
            self.epoch = first["epoch"] + (1 if self._all_ended() and auto_epoch else 0)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self._epoch_given = True

    def __iter__(self) -> Iterator[int]:
        if self._auto_epoch and not self._epoch_given and self._passes:
            self.epoch += 1
        self._passes += 1
        saved, self._saved = self._saved, None
        self._base = None
        if saved is not None and saved[0]["epoch"] == self.epoch and not self._all_ended(saved):
            self._base = saved
        self._indices = pass_indices(self._describe(consumed=0))
        self.consumed, self.ended = 0, False
        return iter(self._indices)

    def __len__(self) -> int:
        if self._saved is not None and not self._all_ended():
            return len(remaining(self._saved, self.num_replicas, self.rank))
        return len(self._indices) if self._indices is not None else super().__len__()

    def handed(self, batch_size: int) -> None:
        """The loader handed one batch of (at most) ``batch_size`` indices to the caller."""
        assert self._indices is not None
        self.consumed = min(self.consumed + batch_size, len(self._indices))

    def position(self) -> dict[str, Any] | None:
        """This rank's position, kept with a checkpoint."""
        if self._indices is None:
            if self._saved is None:
                return None
            # no pass yet after a restart: still where the checkpoint was
            self._base = None if self._all_ended() else self._saved
            return self._describe(consumed=0, ended=self._all_ended())
        return self._describe(consumed=self.consumed, ended=self.ended)

    def _describe(self, *, consumed: int, ended: bool = False) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "consumed": consumed,
            "ended": ended,
            "base": self._base,
            "world": self.num_replicas,
            "rank": self.rank,
            "len": len(self.dataset),  # type: ignore[arg-type]
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }

    def _all_ended(self, saved: list[dict[str, Any]] | None = None) -> bool:
        positions = saved if saved is not None else self._saved
        return bool(positions) and all(p["ended"] for p in positions or ())

    def _usable(self, saved: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if not saved or any(p is None for p in saved):
            return None
        now = self._describe(consumed=0)
        changed = [k for k in _SAME if any(p.get(k) != now[k] for p in saved)]
        if changed or len({p["epoch"] for p in saved}) > 1:
            warnings.warn(
                f"prepare_data_loader: the checkpoint's loader position does not fit this "
                f"loader ({', '.join(changed) or 'epochs differ'} changed): its epoch starts "
                "over. HINT: restore with the same dataset and loader arguments",
                stacklevel=3,
            )
            return None
        return list(saved)


class ResumableLoader(DataLoader):  # type: ignore[type-arg]
    """A DataLoader that tells its :class:`ResumableSampler` which batches it handed out."""

    # A generator, not DataLoader's iterator class: what callers use of it is iteration.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        sampler = self.sampler
        assert isinstance(sampler, ResumableSampler)
        batches = timed_batches(super().__iter__(), self)
        batch_size = self.batch_size or 1
        for batch in batches:
            sampler.handed(batch_size)
            yield batch
        sampler.ended = True


def timed_batches(batches: Iterator[Any], loader: object) -> Iterator[Any]:
    """``batches``, each wait for one told to the training function's time ledger (a
    data wait of ``loader``); as they are outside a training function."""
    sink = data_wait.current()
    if sink is None:
        yield from batches
        return
    while True:
        sink.data_wait_begin(loader, None)
        started = time.perf_counter()
        try:
            batch = next(batches)
        except StopIteration:
            return
        finally:
            sink.data_wait_end(loader, time.perf_counter() - started)
        yield batch
