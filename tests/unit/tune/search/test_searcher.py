"""The Searcher interface and its wrappers: ConcurrencyLimiter and Repeater."""

from __future__ import annotations

import pytest

from lockstep import tune
from lockstep.tune.search import BasicVariantGenerator, ConcurrencyLimiter, Repeater, Searcher
from lockstep.tune.search.optuna import OptunaSearch
from tests.unit.tune.fakes import through_experiment_state


class Counting(Searcher):
    """A searcher of its own, as a user writes one: configs {"i": 0}, {"i": 1}, ...;
    records what it is told."""

    def __init__(self, limit=None, metric="loss", mode="min"):
        super().__init__(metric, mode)
        self.limit = limit
        self.given = 0
        self.results = []
        self.completed = []

    def suggest(self, trial_id):
        if self.limit is not None and self.given >= self.limit:
            return Searcher.FINISHED
        self.given += 1
        return {"i": self.given - 1}

    def on_trial_result(self, trial_id, result):
        self.results.append((trial_id, result))

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed.append((trial_id, result, error))

    def is_finished(self):
        return self.limit is not None and self.given >= self.limit


def test_a_searcher_takes_the_tuners_metric_and_mode_only_when_it_has_none():
    own = Counting(metric="acc", mode="max")
    own.set_search_properties("loss", "min", {})
    assert (own.metric, own.mode) == ("acc", "max")
    bare = Searcher()
    assert bare.set_search_properties("loss", "min", {}) is True
    assert (bare.metric, bare.mode) == ("loss", "min")
    with pytest.raises(ValueError, match='mode must be "min" or "max", got \'up\''):
        Searcher(mode="up")
    with pytest.raises(NotImplementedError):
        bare.suggest("t0")
    assert bare.is_finished() is False


def test_restoring_a_trial_moves_a_plain_searcher_past_it():
    searcher = Counting()
    searcher.restore_trial("t0", {"i": 0})
    assert searcher.suggest("t1") == {"i": 1}


def test_the_limiter_holds_suggestions_while_max_concurrent_trials_run():
    inner = Counting()
    limited = ConcurrencyLimiter(inner, max_concurrent=2)
    assert [limited.suggest(t) for t in ("a", "b", "c")] == [{"i": 0}, {"i": 1}, None]
    assert inner.given == 2  # the inner searcher was not asked for the third
    limited.on_trial_result("a", {"loss": 3})
    limited.on_trial_complete("a", {"loss": 1})
    assert inner.results == [("a", {"loss": 3})] and inner.completed == [("a", {"loss": 1}, False)]
    assert limited.suggest("c") == {"i": 2}
    assert limited.suggest("d") is None


def test_the_limiter_passes_finished_and_nothing_now_through_without_counting_them():
    limited = ConcurrencyLimiter(Counting(limit=1), max_concurrent=1)
    assert limited.suggest("a") == {"i": 0}
    limited.on_trial_complete("a", {"loss": 1})
    assert limited.suggest("b") == "FINISHED" and limited.is_finished()
    assert limited._live == set()


def test_a_batch_starts_and_is_learnt_from_only_when_the_previous_one_is_complete():
    inner = Counting()
    batch = ConcurrencyLimiter(inner, max_concurrent=2, batch=True)
    assert [batch.suggest(t) for t in ("a", "b")] == [{"i": 0}, {"i": 1}]
    batch.on_trial_complete("a", {"loss": 1})
    assert batch.suggest("c") is None  # half a batch is done: nothing new
    assert inner.completed == []  # and the searcher has learnt nothing yet
    batch.on_trial_complete("b", None, error=True)
    assert inner.completed == [("a", {"loss": 1}, False), ("b", None, True)]
    assert [batch.suggest(t) for t in ("c", "d", "e")] == [{"i": 2}, {"i": 3}, None]


def test_a_restored_trial_counts_against_the_limit():
    limited = ConcurrencyLimiter(Counting(), max_concurrent=1)
    limited.restore_trial("old", {"i": 0})
    assert limited.suggest("new") is None
    limited.on_trial_complete("old", {"loss": 1})
    assert limited.suggest("new") == {"i": 1}


def test_the_limiter_gives_the_tuners_search_properties_to_its_searcher():
    inner = BasicVariantGenerator()
    limited = ConcurrencyLimiter(inner, max_concurrent=1)
    limited.set_search_properties("loss", "min", {"x": tune.grid_search([1, 2])}, num_samples=1)
    assert (limited.metric, inner.metric) == ("loss", "loss")
    assert inner.total_trials == 2


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "max_concurrent must be >= 1, got 0"),
        (1.5, "must be an integer, got 1.5"),
        (True, "must be an integer, got True"),
    ],
)
def test_the_limit_must_be_a_positive_integer(value, message):
    with pytest.raises(ValueError, match=message):
        ConcurrencyLimiter(Counting(), max_concurrent=value)


def test_a_batch_of_optuna_trials_is_told_to_the_study_when_complete():
    search = OptunaSearch(metric="loss", mode="min", seed=0)
    batch = ConcurrencyLimiter(search, max_concurrent=2, batch=True)
    batch.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
    batch.suggest("a"), batch.suggest("b")
    batch.on_trial_complete("a", {"loss": 0.5})
    states = [t.state.name for t in search.study.trials]
    assert states == ["RUNNING", "RUNNING"]
    batch.on_trial_complete("b", {"loss": 0.25})
    assert [t.value for t in search.study.trials] == [0.5, 0.25]


def test_repeater_repeats_each_config_with_its_index():
    repeated = Repeater(Counting(), repeat=3)
    configs = [repeated.suggest(f"t{i}") for i in range(6)]
    assert configs == [{"i": i, "__trial_index__": k} for i in (0, 1) for k in (0, 1, 2)]
    plain = Repeater(Counting(), repeat=2, set_index=False)
    assert [plain.suggest(f"t{i}") for i in range(3)] == [{"i": 0}, {"i": 0}, {"i": 1}]


def test_repeater_tells_its_searcher_the_mean_once_every_repeat_is_done():
    inner = Counting()
    repeated = Repeater(inner, repeat=3)
    for i in range(3):
        repeated.suggest(f"t{i}")
    repeated.on_trial_complete("t0", {"loss": 1.0})
    repeated.on_trial_complete("t1", {"loss": 2.0})
    assert inner.completed == []
    repeated.on_trial_complete("t2", None, error=True)  # a failed repeat does not count
    assert inner.completed == [("t0", {"loss": 1.5}, False)]  # under the first trial's id


def test_repeater_reports_an_error_when_no_repeat_has_a_score():
    inner = Counting()
    repeated = Repeater(inner, repeat=2)
    repeated.suggest("a"), repeated.suggest("b")
    repeated.on_trial_complete("a", {"other": 1})
    repeated.on_trial_complete("b", None, error=True)
    assert inner.completed == [("a", None, True)]
    repeated.on_trial_complete("unknown", {"loss": 1})  # a trial it never gave is ignored
    assert len(inner.completed) == 1


def test_repeater_finishes_with_its_searcher_once_the_last_config_is_repeated():
    repeated = Repeater(Counting(limit=1), repeat=2)
    assert repeated.suggest("a") == {"i": 0, "__trial_index__": 0}
    assert not repeated.is_finished()
    assert repeated.suggest("b") == {"i": 0, "__trial_index__": 1}
    assert repeated.is_finished() and repeated.suggest("c") == "FINISHED"


def test_repeater_passes_nothing_now_through():
    class Later(Searcher):
        def suggest(self, trial_id):
            return None

    assert Repeater(Later(), repeat=2).suggest("a") is None


@pytest.mark.parametrize("repeat", [0, 1.0, True])
def test_repeat_must_be_a_positive_integer(repeat):
    with pytest.raises(ValueError, match=r"repeat must be an integer >= 1"):
        Repeater(Counting(), repeat=repeat)


def test_repeated_optuna_trials_give_the_study_their_mean(tmp_path):
    search = OptunaSearch(metric="loss", mode="min", seed=0)
    repeated = Repeater(search, repeat=2)
    repeated.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
    first, second = repeated.suggest("a"), repeated.suggest("b")
    assert first["x"] == second["x"]
    repeated.on_trial_complete("a", {"loss": 1.0})
    repeated.on_trial_complete("b", {"loss": 3.0})
    assert [(t.state.name, t.value) for t in search.study.trials] == [("COMPLETE", 2.0)]


def test_wrappers_survive_the_experiment_state(tmp_path):
    inner = Counting()
    limited = ConcurrencyLimiter(Repeater(inner, repeat=2), max_concurrent=3, batch=True)
    for trial_id in ("a", "b", "c"):
        limited.suggest(trial_id)
    limited.on_trial_complete("a", {"loss": 1.0})
    restored = through_experiment_state(tmp_path, searcher=limited)["searcher"]
    assert restored.suggest("d") is None  # the batch is still open
    restored.on_trial_complete("b", {"loss": 3.0})
    restored.on_trial_complete("c", {"loss": 5.0})
    told = restored.searcher.searcher.completed
    assert told == [("a", {"loss": 2.0}, False)]  # c's group waits for its second repeat
    assert restored.suggest("d") == {"i": 1, "__trial_index__": 1}


def test_the_limiter_tells_its_searcher_of_trials_it_did_not_count():
    inner = Counting()
    limited = ConcurrencyLimiter(inner, max_concurrent=1, batch=True)
    limited.on_trial_complete("from before", {"loss": 1.0})
    assert inner.completed == [("from before", {"loss": 1.0}, False)]
    assert limited.suggest("a") == {"i": 0}


def test_repeater_scores_with_the_metric_the_tuner_gives():
    inner = Counting(metric=None, mode=None)
    repeated = Repeater(inner, repeat=2)
    repeated.set_search_properties("acc", "max", {})
    assert (repeated.metric, inner.metric) == ("acc", "acc")
    repeated.suggest("a"), repeated.suggest("b")
    repeated.on_trial_complete("a", {"acc": 0.5, "loss": 9})
    repeated.on_trial_complete("b", {"acc": 0.7, "loss": 9})
    assert inner.completed == [("a", {"acc": pytest.approx(0.6)}, False)]


def test_a_restored_repeater_goes_on_with_the_group_it_was_in(tmp_path):
    repeated = Repeater(Counting(), repeat=3)
    repeated.suggest("a")
    saved = through_experiment_state(tmp_path, searcher=repeated)["searcher"]
    saved.restore_trial("b", {"i": 0, "__trial_index__": 1})  # asked after the save
    assert saved.suggest("c") == {"i": 0, "__trial_index__": 2}
    assert saved.suggest("d") == {"i": 1, "__trial_index__": 0}
