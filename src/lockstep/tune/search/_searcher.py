"""The search algorithm interface (Ray Tune's ``Searcher``) and its two wrappers."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


class Searcher:
    """Suggests configs and learns from their results; Ray Tune's interface.

    ``suggest`` returns a config, None (nothing now: ask again later) or
    :attr:`FINISHED` (nothing ever again).

    Example:
        >>> class Fixed(Searcher):
        ...     def suggest(self, trial_id):
        ...         return {"lr": 0.1}
        >>> Fixed(metric="loss", mode="min").suggest("t1")
        {'lr': 0.1}
    """

    FINISHED = "FINISHED"

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f'mode must be "min" or "max", got {mode!r}')
        self._metric = metric
        self._mode = mode

    @property
    def metric(self) -> str | None:
        """The metric the search optimises."""
        return self._metric

    @property
    def mode(self) -> str | None:
        """``"min"`` or ``"max"``."""
        return self._mode

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any
    ) -> bool:
        """Receive the Tuner's metric, mode and param space; False if already set."""
        if self._metric is None and metric is not None:
            self._metric = metric
        if self._mode is None and mode is not None:
            self._mode = mode
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """A config for the new trial ``trial_id``."""
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """An intermediate result of a trial."""

    def restore_trial(self, trial_id: str, config: dict[str, Any]) -> None:
        """A trial suggested after the saved state, found again on restore: by default the
        search moves past it by suggesting again (a seeded generator repeats itself)."""
        self.suggest(trial_id)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """A trial's last result (or its error)."""

    def is_finished(self) -> bool:
        """Whether no config will ever be suggested again."""
        return False


def innermost(searcher: Searcher) -> Any:
    """The search inside ``searcher``'s wrappers (itself when it wraps none)."""
    inner: Any = searcher
    while hasattr(inner, "searcher"):
        inner = inner.searcher
    return inner


class _Wrapper(Searcher):
    """A searcher around another one (``searcher``), whose metric and mode it shares."""

    def __init__(self, searcher: Searcher) -> None:
        super().__init__(searcher.metric, searcher.mode)
        self.searcher = searcher

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any
    ) -> bool:
        super().set_search_properties(metric, mode, config)
        return self.searcher.set_search_properties(metric, mode, config, **spec)


class ConcurrencyLimiter(_Wrapper):
    """Lets at most ``max_concurrent`` trials of ``searcher`` run at once.

    With ``batch``, the trials run in batches of ``max_concurrent``: no trial starts, and
    ``searcher`` learns no result, until the whole batch has completed (as in Ray Tune).

    Example:
        >>> from lockstep.tune.search import BasicVariantGenerator
        >>> limited = ConcurrencyLimiter(BasicVariantGenerator(), max_concurrent=2)
        >>> limited.max_concurrent
        2
    """

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int):
            raise ValueError(f"max_concurrent must be an integer, got {max_concurrent!r}")
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        super().__init__(searcher)
        self.max_concurrent = max_concurrent
        self.batch = batch
        self._live: set[str] = set()
        # The batch's completed trials, told to the searcher when the batch is done.
        self._completed: dict[str, tuple[dict[str, Any] | None, bool]] = {}

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if len(self._live) >= self.max_concurrent:
            return None
        config = self.searcher.suggest(trial_id)
        if isinstance(config, dict):
            self._live.add(trial_id)
        return config

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def restore_trial(self, trial_id: str, config: dict[str, Any]) -> None:
        self.searcher.restore_trial(trial_id, config)
        self._live.add(trial_id)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        if not self.batch or trial_id not in self._live:
            self.searcher.on_trial_complete(trial_id, result, error)
            self._live.discard(trial_id)
            return
        self._completed[trial_id] = (result, error)
        if len(self._completed) < len(self._live):
            return
        for done, (done_result, done_error) in self._completed.items():
            self.searcher.on_trial_complete(done, done_result, done_error)
        self._live.clear()
        self._completed.clear()

    def is_finished(self) -> bool:
        return self.searcher.is_finished()


INDEX_KEY = "__trial_index__"


class Repeater(_Wrapper):
    """Runs every config of ``searcher`` ``repeat`` times; the searcher learns the mean.

    With ``set_index`` each repeat's config holds ``__trial_index__`` (0 to repeat - 1),
    e.g. to seed each repeat differently.

    Example:
        >>> from lockstep.tune.search import BasicVariantGenerator
        >>> Repeater(BasicVariantGenerator(), repeat=3).repeat
        3
    """

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True) -> None:
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"repeat must be an integer >= 1, got {repeat!r}")
        super().__init__(searcher)
        self.repeat = repeat
        self.set_index = set_index
        self._current: tuple[str, dict[str, Any]] | None = None
        self._given = 0
        self._group_of: dict[str, str] = {}
        self._scores: dict[str, list[float]] = defaultdict(list)
        self._done: dict[str, int] = defaultdict(int)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._current is None or self._given >= self.repeat:
            config = self.searcher.suggest(trial_id)
            if not isinstance(config, dict):
                return config
            self._current, self._given = (trial_id, config), 0
        group, config = self._current
        config = dict(config)
        if self.set_index:
            config[INDEX_KEY] = self._given
        self._given += 1
        self._group_of[trial_id] = group
        return config

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        group = self._group_of.pop(trial_id, None)
        if group is None:
            return
        metric = self.metric
        if not error and result is not None and metric is not None and metric in result:
            self._scores[group].append(float(result[metric]))
        self._done[group] += 1
        if self._done[group] < self.repeat:
            return
        scores = self._scores.pop(group, [])
        del self._done[group]
        if scores and metric is not None:
            self.searcher.on_trial_complete(group, {metric: sum(scores) / len(scores)})
        else:
            self.searcher.on_trial_complete(group, None, error=True)

    def is_finished(self) -> bool:
        return self.searcher.is_finished() and (self._current is None or self._given >= self.repeat)
