"""The order in which a reader's files are read: as listed, or shuffled (Ray's ``shuffle=``).

``shuffle="files"`` and an unseeded ``FileShuffleConfig`` draw one random order when the
dataset is made. A seeded config gives the same order to every dataset made with it, and,
with ``reseed_after_execution=True`` (Ray's default), a new one at every pass over the
data: pass ``i`` reads the files in the order ``default_rng([seed, i])`` draws.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lockstep.data._sources import Source


@dataclass(frozen=True)
class FileShuffleConfig:
    """How a reader shuffles its files (Ray's ``FileShuffleConfig``).

    Args:
        seed: None for a random order; an int for an order that the seed decides.
        reseed_after_execution: With a seed, draw a new order at every pass over the data
            (the same sequence of orders for the same seed); False keeps one order.

    Example:
        >>> import lockstep.data as ld
        >>> FileShuffleConfig(seed=42, reseed_after_execution=False).get_seed()
        42
    """

    seed: int | None = None
    reseed_after_execution: bool = True

    def __post_init__(self) -> None:
        if self.seed is not None and (
            not isinstance(self.seed, int) or isinstance(self.seed, bool)
        ):
            raise ValueError(
                f"Seed must be an integer or None. HINT: FileShuffleConfig(seed=42), got "
                f"{self.seed!r}"
            )

    def get_seed(self, execution_idx: int = 0) -> int | None:
        """The seed of pass ``execution_idx``: None, the seed, or one drawn from both."""
        if self.seed is None or not self.reseed_after_execution:
            return self.seed
        return int(np.random.default_rng([self.seed, execution_idx]).integers(2**31))


def ordered(sources: Sequence[Source], shuffle: Any, where: str) -> list[Source]:
    """``sources`` (one per file) in the order ``shuffle`` asks for."""
    if shuffle is None:
        return list(sources)
    if shuffle == "files":
        shuffle = FileShuffleConfig()
    if not isinstance(shuffle, FileShuffleConfig):
        raise ValueError(
            f"{where}: invalid value for 'shuffle': {shuffle!r}. Valid values are None, "
            "'files', or a FileShuffleConfig. HINT: shuffle=FileShuffleConfig(seed=42)"
        )
    if shuffle.seed is not None and shuffle.reseed_after_execution and len(sources) > 1:
        return [PassShuffledSource(tuple(sources), shuffle.seed)]
    order = np.random.default_rng(shuffle.seed).permutation(len(sources))
    return [sources[i] for i in order]


class PassShuffledSource(Source):
    """Files read in a new order at every pass, the same orders for the same seed.

    Attributes:
        parts: The files' sources, as listed.
        seed: The config's seed.
    """

    reorders_rows = True  # row i is not the same row at every pass (see DataIterator)

    def __init__(self, parts: tuple[Source, ...], seed: int) -> None:
        self.parts, self.seed = parts, seed
        self._passes = 0

    def read(self) -> Iterator[Any]:
        rng = np.random.default_rng([self.seed, self._passes])
        self._passes += 1
        for i in rng.permutation(len(self.parts)):
            yield from self.parts[i].read()

    def num_rows(self) -> int | None:
        counts = [p.num_rows() for p in self.parts]
        return None if any(c is None for c in counts) else sum(c for c in counts if c)

    def schema(self) -> Any:
        return self.parts[0].schema()

    def input_files(self) -> list[str]:
        return [f for p in self.parts for f in p.input_files()]

    def describe(self) -> str:
        return f"{len(self.parts)} files in a new order at each pass (seed {self.seed})"
