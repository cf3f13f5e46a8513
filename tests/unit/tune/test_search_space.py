"""Search-space domains: bounds, quantization, log scales and their distributions, through
both ways a value is drawn (numpy for PBT, Optuna's RandomSampler for the default search),
and their Optuna equivalents."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from lockstep import tune
from lockstep.tune._search_space import Categorical, Float, Integer, grid_search, is_grid
from lockstep.tune.search import BasicVariantGenerator


def searched(domain, count, seed=0):
    """``count`` values of ``domain`` from the default search (Optuna's RandomSampler)."""
    gen = BasicVariantGenerator(random_state=seed)
    gen.set_search_properties(None, None, {"v": domain}, num_samples=count)
    return [gen.suggest(f"t{i}")["v"] for i in range(count)]


def sampled(domain, count, seed=0):
    """``count`` values of ``domain`` drawn with numpy (as PBT resamples)."""
    rng = np.random.default_rng(seed)
    return [domain.sample(rng) for _ in range(count)]


def frequencies(values, support):
    return np.array([values.count(v) for v in support]) / len(values)


BOTH = pytest.mark.parametrize("draw", [searched, sampled], ids=["optuna", "numpy"])

bounds = st.tuples(
    st.floats(-1e6, 1e6, allow_nan=False), st.floats(-1e6, 1e6, allow_nan=False)
).filter(lambda b: b[0] < b[1])


@given(bounds, st.floats(0, 1))
def test_a_uniform_value_stays_within_its_bounds(b, fraction):
    domain = tune.uniform(*b)
    value = domain.from_random(b[0] + fraction * (b[1] - b[0]))
    assert b[0] <= value <= b[1]


@given(
    st.integers(-1000, 1000),
    st.integers(1, 1000),
    st.sampled_from([0.1, 0.2, 0.25, 0.5, 2.0, 5e-5, 3.0]),
    st.floats(0, 1),
)
def test_a_quantized_float_is_a_multiple_of_q_within_its_bounds(low, width, q, fraction):
    lower, upper = low * q, (low + width) * q
    domain = tune.quniform(lower, upper, q)
    value = domain.from_random(lower + fraction * (upper - lower))
    assert lower <= value <= upper
    assert math.isclose(value / q, round(value / q), abs_tol=1e-6)


@given(st.floats(1e-8, 1e3), st.floats(1.001, 1e6), st.floats(0, 1))
def test_a_log_uniform_value_stays_within_its_bounds(lower, ratio, fraction):
    upper = lower * ratio
    domain = tune.loguniform(lower, upper)
    value = domain.from_random(math.exp(math.log(lower) + fraction * math.log(ratio)))
    assert lower <= value <= upper


@given(
    st.integers(-50, 50),
    st.integers(1, 60),
    st.sampled_from([None, 1, 2, 3, 5]),
    st.booleans(),
    st.floats(0, 1),
)
def test_an_integer_is_in_range_and_a_multiple_of_q(lower, width, q, log, fraction):
    upper = lower + width
    assume(not log or lower > 0)
    step = q or 1
    assume(any(v % step == 0 for v in range(lower, upper + 1)))
    domain = Integer(lower, upper, log=log, q=q)
    distribution = domain.random_distribution()
    raw = distribution.low + fraction * (distribution.high - distribution.low)
    value = domain.from_random(raw if log else round(raw))
    assert isinstance(value, int) and value % step == 0
    assert lower <= value <= (upper if q not in (None, 1) else upper - 1)


@BOTH
def test_uniform_values_spread_evenly(draw):
    values = np.array(draw(tune.uniform(-5, -1), 2000))
    assert values.min() >= -5 and values.max() <= -1
    assert np.sum(values == -1) + np.sum(values == -5) <= 1  # none piled up at a bound
    assert abs(values.mean() + 3) < 0.1 and abs((values < -4).mean() - 0.25) < 0.03


@BOTH
def test_log_uniform_values_are_even_in_their_logarithm(draw):
    values = np.array(draw(tune.loguniform(1e-4, 1e-0), 2000))
    assert values.min() >= 1e-4 and values.max() <= 1
    assert np.sum(values == 1) + np.sum(values == 1e-4) <= 1  # none piled up at a bound
    assert abs((values < 1e-2).mean() - 0.5) < 0.04  # half below the geometric middle
    assert abs((values < 1e-3).mean() - 0.25) < 0.03


@BOTH
def test_randint_excludes_its_upper_bound_and_gives_each_integer_as_often(draw):
    values = draw(tune.randint(-2, 2), 2000)
    assert set(values) == {-2, -1, 0, 1}
    assert np.allclose(frequencies(values, [-2, -1, 0, 1]), 0.25, atol=0.04)


@BOTH
def test_qrandint_gives_each_multiple_as_often_and_includes_its_upper_bound(draw):
    values = draw(tune.qrandint(0, 10, 5), 1500)
    assert set(values) == {0, 5, 10}
    assert np.allclose(frequencies(values, [0, 5, 10]), 1 / 3, atol=0.04)
    inward = draw(tune.qrandint(-21, 12, 3), 300)  # Ray Tune's own example
    assert min(inward) >= -21 and max(inward) <= 12 and {v % 3 for v in inward} == {0}


@BOTH
def test_qrandint_with_q_one_excludes_its_upper_bound_as_randint(draw):
    assert set(draw(tune.qrandint(1, 4, 1), 300)) == {1, 2, 3}


@BOTH
def test_lograndint_floors_a_log_uniform_float_as_ray_tune_does(draw):
    values = draw(tune.lograndint(1, 10), 3000)
    assert set(values) <= set(range(1, 10)) and 9 in values
    expected = [math.log((k + 1) / k) / math.log(10) for k in range(1, 10)]  # P(1) = 0.30
    assert np.allclose(frequencies(values, range(1, 10)), expected, atol=0.03)


@BOTH
def test_qlograndint_gives_multiples_of_q_within_both_bounds(draw):
    values = draw(tune.qlograndint(2, 20, 2), 1000)
    assert min(values) >= 2 and max(values) <= 20 and {v % 2 for v in values} == {0}
    assert 20 in values and values.count(2) > values.count(20)  # logarithmic: small first


@BOTH
def test_quniform_and_qloguniform_give_multiples_of_q_within_their_bounds(draw):
    values = np.array(draw(tune.quniform(3.2, 5.4, 0.2), 500))
    assert values.min() >= 3.2 and values.max() <= 5.4
    assert np.allclose(values / 0.2, np.round(values / 0.2))
    logs = np.array(draw(tune.qloguniform(1e-4, 1e-1, 5e-5), 500))
    assert logs.min() >= 1e-4 and logs.max() <= 1e-1
    assert np.allclose(logs / 5e-5, np.round(logs / 5e-5))


@BOTH
def test_choice_picks_any_category_as_often_even_unhashable_ones(draw):
    categories = [{"layers": 1}, {"layers": 2}, [3], None]
    values = draw(tune.choice(categories), 2000)
    counts = [sum(v == c for v in values) / len(values) for c in categories]
    assert np.allclose(counts, 0.25, atol=0.04)


@BOTH
def test_normal_values_have_their_mean_and_deviation(draw):
    values = np.array(draw(tune.randn(10, 2), 2000))
    assert abs(values.mean() - 10) < 0.2 and abs(values.std() - 2) < 0.2
    rounded = np.array(draw(tune.qrandn(10, 2, 0.2), 200))
    assert np.allclose(rounded / 0.2, np.round(rounded / 0.2))


def test_a_sample_from_function_sees_the_config_in_every_spelling():
    spec = {"a": 3, "nested": {"b": 4}}
    assert tune.sample_from(lambda s: s.config.a * s.config.nested.b).sample(None, spec) == 12
    assert tune.sample_from(lambda s: s["a"] + s["config"]["nested"]["b"]).sample(None, spec) == 7
    assert tune.sample_from(lambda: "no arguments").sample(None, spec) == "no arguments"

    def with_default(spec, offset=1):
        return spec.a + offset

    assert tune.sample_from(with_default).sample(None, spec) == 4
    with pytest.raises(AttributeError, match=r"missing"):
        tune.sample_from(lambda s: s.config.missing).sample(None, spec)


def test_a_sample_from_function_must_take_the_config_or_nothing():
    def two(spec, other):
        return 0

    with pytest.raises(ValueError, match=r"must take one argument .the config. or none. HINT"):
        tune.sample_from(two)
    with pytest.raises(ValueError, match=r"sample_from takes a function"):
        tune.sample_from(3)


@pytest.mark.parametrize(
    "domain, distribution",
    [
        (tune.uniform(0, 1), optuna.distributions.FloatDistribution(0, 1)),
        (tune.quniform(0, 1, 0.25), optuna.distributions.FloatDistribution(0, 1, step=0.25)),
        (tune.loguniform(1e-3, 1), optuna.distributions.FloatDistribution(1e-3, 1, log=True)),
        (tune.randint(1, 5), optuna.distributions.IntDistribution(1, 4)),
        (tune.qrandint(1, 10, 3), optuna.distributions.IntDistribution(3, 9, step=3)),
        (tune.qrandint(0, 10, 1), optuna.distributions.IntDistribution(0, 9)),
        (tune.lograndint(1, 100), optuna.distributions.IntDistribution(1, 99, log=True)),
        (tune.choice(["a", "b"]), optuna.distributions.CategoricalDistribution(["a", "b"])),
    ],
)
def test_each_domain_has_the_optuna_distribution_of_the_same_values(domain, distribution):
    assert domain.to_optuna() == distribution


@pytest.mark.parametrize(
    "domain", [tune.randn(0, 1), tune.qlograndint(1, 100, 5), tune.sample_from(lambda: 1)]
)
def test_a_domain_without_an_optuna_equivalent_says_what_to_use(domain):
    with pytest.raises(ValueError, match=r"has no Optuna equivalent. HINT: use uniform"):
        domain.to_optuna()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: tune.uniform(1, 1), r"lower must be below upper, got \[1, 1\]"),
        (lambda: tune.loguniform(0, 1), "a log scale needs lower > 0, got 0. HINT"),
        (lambda: tune.lograndint(0, 10), "a log scale needs lower > 0, got 0"),
        (lambda: tune.randint(5, 5), r"lower must be below upper, got \[5, 5\)"),
        (lambda: tune.quniform(1, 10, 3), "the bound 1 is not a multiple of q=3.*HINT"),
        (lambda: tune.qrandint(1, 2, 5), r"no multiple of q=5 lies in \[1, 2\]. HINT"),
        (lambda: tune.randn(0, 0), "sd must be > 0, got 0"),
        (lambda: tune.choice([]), "choice.. needs at least one category. HINT"),
    ],
)
def test_bad_domains_are_refused_when_written(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_ray_tunes_spellings_make_the_same_domains():
    assert (tune.qloguniform(1, 100, 1).log, tune.qloguniform(1, 100, 1).q) == (True, 1)
    assert isinstance(tune.lograndint(1, 10), Integer) and tune.lograndint(1, 10).log
    assert isinstance(tune.quniform(0, 1, 0.5), Float)
    assert isinstance(tune.choice([1]), Categorical)
    assert grid_search([1, 2]) == {"grid_search": [1, 2]} and is_grid(grid_search([]))
    assert not is_grid({"grid_search": [1], "other": 2})
    assert repr(tune.qrandint(0, 10, 5)) == "Integer(0, 10, log=False, q=5)"


def test_a_callable_without_a_signature_is_given_the_config():
    assert tune.sample_from(dict).sample(None, {"a": 1}) == {"a": 1}
