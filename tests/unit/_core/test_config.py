import pytest

from lockstep._core.callback import UserCallback
from lockstep._core.config import (
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)


class TestScalingConfig:
    def test_defaults(self):
        config = ScalingConfig()
        assert (config.num_workers, config.use_gpu, config.placement_strategy) == (1, False, "PACK")
        assert config.num_cpus_per_worker == 1.0 and config.num_gpus_per_worker == 0.0

    @pytest.mark.parametrize("bad", [-1, -5])
    def test_negative_num_workers(self, bad):
        with pytest.raises(ValueError, match=r"num_workers must be >= 0.*HINT"):
            ScalingConfig(num_workers=bad)

    @pytest.mark.parametrize("bad", [2.5, "2", True, None])
    def test_non_integer_num_workers(self, bad):
        with pytest.raises(ValueError, match=r"num_workers must be an integer.*HINT"):
            ScalingConfig(num_workers=bad)

    def test_a_min_max_tuple_makes_the_run_elastic(self):
        config = ScalingConfig(num_workers=(1, 4), resources_per_worker={"CPU": 2})
        assert config.elasticity_enabled
        assert (config.min_workers, config.max_workers) == (1, 4)
        assert config.elastic_resize_monitor_interval_s == 60.0
        assert config.total_resources == {"CPU": 8.0}  # an upper bound: max_workers
        fixed = ScalingConfig(num_workers=3)
        assert not fixed.elasticity_enabled
        assert (fixed.min_workers, fixed.max_workers) == (3, 3)

    @pytest.mark.parametrize(
        ("bad", "message"),
        [
            ((3, 2), r"min_workers=3 must be <= max_workers=2.*HINT: num_workers=\(2, 3\)"),
            ((0, 4), r"num_workers\[0\] \(min_workers\) must be >= 1.*HINT"),
            ((-1, 4), r"min_workers\) must be >= 1.*HINT"),
            ((1, 2.5), r"num_workers\[1\] \(max_workers\) must be an integer.*HINT"),
            ((True, 2), r"must be an integer.*HINT"),
            ((1, 2, 3), r"must be an int or a tuple of two ints.*HINT"),
            ([1, 4], r"must be an int or a tuple of two ints.*HINT"),
        ],
    )
    def test_a_bad_elastic_range_says_how_to_fix_it(self, bad, message):
        with pytest.raises(ValueError, match=message):
            ScalingConfig(num_workers=bad)

    @pytest.mark.parametrize("bad", [-1, "60", None])
    def test_the_resize_interval_is_non_negative_seconds(self, bad):
        with pytest.raises(ValueError, match=r"elastic_resize_monitor_interval_s.*HINT"):
            ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=bad)

    def test_keyword_only(self):
        with pytest.raises(TypeError):
            ScalingConfig(2)  # type: ignore[misc]

    def test_gpu_resources_need_use_gpu(self):
        with pytest.raises(ValueError, match="use_gpu=False"):
            ScalingConfig(num_workers=1, resources_per_worker={"GPU": 0.5})
        assert (
            ScalingConfig(use_gpu=True, resources_per_worker={"GPU": 0.5}).num_gpus_per_worker
            == 0.5
        )

    def test_negative_resource(self):
        with pytest.raises(ValueError, match=r"resources_per_worker\['CPU'\]"):
            ScalingConfig(resources_per_worker={"CPU": -1})

    def test_unknown_strategy_and_executor(self):
        with pytest.raises(ValueError, match="placement_strategy"):
            ScalingConfig(placement_strategy="RANDOM")
        with pytest.raises(ValueError, match="executor"):
            ScalingConfig(executor="k8s")  # type: ignore[arg-type]

    def test_coerce_accepts_the_older_dict_form(self):
        assert ScalingConfig.coerce({"num_workers": 2, "use_gpu": False}) == ScalingConfig(
            num_workers=2
        )
        assert ScalingConfig.coerce(None) == ScalingConfig()
        with pytest.raises(ValueError, match=r"unknown keys \['workers'\]"):
            ScalingConfig.coerce({"workers": 2})
        with pytest.raises(ValueError, match="must be a ScalingConfig or a dict"):
            ScalingConfig.coerce(4)  # type: ignore[arg-type]

    def test_frozen(self):
        with pytest.raises(AttributeError):
            ScalingConfig().num_workers = 3  # type: ignore[misc]

    def test_coerce_accepts_the_older_actor_keys(self):
        config = ScalingConfig.coerce({"num_actors": 2, "cpus_per_actor": 2, "gpus_per_actor": 0})
        assert config == ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2})
        assert (config.num_cpus_per_worker, config.use_gpu) == (2.0, False)

    def test_gpus_per_actor_means_use_gpu(self):
        config = ScalingConfig.coerce({"num_actors": 1, "gpus_per_actor": 0.5})
        assert config.use_gpu and config.num_gpus_per_worker == 0.5

    def test_resources_per_actor_and_cpus_per_actor_merge(self):
        config = ScalingConfig.coerce(
            {"num_actors": 3, "resources_per_actor": {"memory": 10}, "cpus_per_actor": 4}
        )
        assert config.num_workers == 3
        assert config.resources_per_worker == {"memory": 10, "CPU": 4}

    def test_cpus_per_actor_alongside_the_new_keys(self):
        config = ScalingConfig.coerce({"num_workers": 2, "cpus_per_actor": 3})
        assert (config.num_workers, config.num_cpus_per_worker) == (2, 3.0)

    @pytest.mark.parametrize(
        ("value", "both"),
        [
            ({"num_actors": 2, "num_workers": 2}, "'num_actors' and 'num_workers'"),
            (
                {"resources_per_actor": {"CPU": 1}, "resources_per_worker": {"CPU": 1}},
                "'resources_per_actor' and 'resources_per_worker'",
            ),
        ],
    )
    def test_an_older_key_and_its_new_name_together(self, value, both):
        with pytest.raises(ValueError, match=f"both {both}.*HINT"):
            ScalingConfig.coerce(value)

    def test_older_keys_are_still_validated(self):
        with pytest.raises(ValueError, match="num_workers must be >= 0"):
            ScalingConfig.coerce({"num_actors": -1})
        with pytest.raises(ValueError, match=r"resources_per_worker\['CPU'\]"):
            ScalingConfig.coerce({"cpus_per_actor": -2})


class TestCheckpointConfig:
    def test_unknown_score_order(self):
        with pytest.raises(ValueError, match=r"unknown checkpoint_score_order 'highest'.*\"max\""):
            CheckpointConfig(checkpoint_score_order="highest")  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", [0, -1, 1.5])
    def test_num_to_keep_must_be_positive_int(self, bad):
        with pytest.raises(ValueError, match="num_to_keep"):
            CheckpointConfig(num_to_keep=bad)

    def test_empty_score_attribute(self):
        with pytest.raises(ValueError, match="metric name"):
            CheckpointConfig(checkpoint_score_attribute="")

    def test_frequency_and_at_end_defaults(self):
        config = CheckpointConfig()
        assert (config.checkpoint_frequency, config.checkpoint_at_end) == (0, None)
        config = CheckpointConfig(checkpoint_frequency=5, checkpoint_at_end=False)
        assert (config.checkpoint_frequency, config.checkpoint_at_end) == (5, False)

    @pytest.mark.parametrize("bad", [-1, 2.5, "5", True])
    def test_frequency_must_be_a_non_negative_int(self, bad):
        with pytest.raises(ValueError, match=r"checkpoint_frequency.*HINT"):
            CheckpointConfig(checkpoint_frequency=bad)

    def test_at_end_must_be_a_bool_or_none(self):
        with pytest.raises(ValueError, match="checkpoint_at_end must be True, False or None"):
            CheckpointConfig(checkpoint_at_end="yes")  # type: ignore[arg-type]


class TestFailureConfig:
    def test_minus_one_is_unlimited_and_below_is_refused(self):
        assert FailureConfig(max_failures=-1).max_failures == -1
        with pytest.raises(ValueError, match="max_failures must be >= -1"):
            FailureConfig(max_failures=-2)

    def test_hang_timeout_is_off_by_default_and_positive_seconds(self):
        assert FailureConfig().hang_timeout_s is None
        assert FailureConfig(hang_timeout_s=0.5).hang_timeout_s == 0.5
        for bad in (0, -1, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=r"positive number of seconds.*HINT: give seconds"):
                FailureConfig(hang_timeout_s=bad)
        for bad in ("600", True):
            with pytest.raises(ValueError, match=r"number of seconds or None.*HINT"):
                FailureConfig(hang_timeout_s=bad)  # type: ignore[arg-type]

    def test_the_assumed_time_between_failures_is_a_day_unless_given(self):
        assert FailureConfig().assumed_mtbf_s == 24 * 3600
        assert FailureConfig(assumed_mtbf_s=3600).assumed_mtbf_s == 3600
        for bad in (0, -5, float("nan"), float("inf"), "1d", True):
            with pytest.raises(ValueError, match=r"assumed_mtbf_s must be a positive.*HINT"):
                FailureConfig(assumed_mtbf_s=bad)  # type: ignore[arg-type]


class TestRunConfig:
    @pytest.mark.parametrize("bad", ["a/b", "", "..", "x\ny"])
    def test_name_must_name_a_directory(self, bad):
        with pytest.raises(ValueError, match="cannot name a directory"):
            RunConfig(name=bad)

    def test_callbacks_must_be_user_callbacks(self):
        with pytest.raises(ValueError, match="UserCallback instances"):
            RunConfig(callbacks=[print])  # type: ignore[list-item]
        assert RunConfig(callbacks=[UserCallback()]).callbacks[0].__class__ is UserCallback

    def test_nested_configs_are_type_checked(self):
        with pytest.raises(ValueError, match="checkpoint_config must be a CheckpointConfig"):
            RunConfig(checkpoint_config={"num_to_keep": 2})  # type: ignore[arg-type]

    def test_verbose_levels(self):
        assert RunConfig(verbose=3).verbose == 3  # Ray's most detailed level
        with pytest.raises(ValueError, match="verbose must be 0, 1, 2 or 3"):
            RunConfig(verbose=4)

    def test_progress_options(self):
        config = RunConfig(progress_metrics=["loss"], progress_total=3)
        assert config.progress_metrics == ("loss",)
        with pytest.raises(ValueError, match="progress_metrics must be a list of metric names"):
            RunConfig(progress_metrics="loss")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="progress_total must be >= 1"):
            RunConfig(progress_total=0)


class TestDataConfig:
    def test_split_all_by_default(self):
        assert DataConfig().should_split("anything")

    def test_names_not_given(self):
        with pytest.raises(ValueError, match=r"names \['valid'\].*\['train'\]"):
            DataConfig(datasets_to_split=["valid"]).check_names(["train"])

    def test_a_string_is_not_a_list_of_names(self):
        with pytest.raises(ValueError, match="list of dataset names"):
            DataConfig(datasets_to_split="train")  # type: ignore[arg-type]

    def test_unsplittable_dataset(self):
        with pytest.raises(ValueError, match=r"datasets\['train'\] is a list.*lockstep.data"):
            DataConfig().check_datasets({"train": [1, 2, 3]})
        DataConfig(datasets_to_split=[]).check_datasets({"train": [1, 2, 3]})

    def test_configure_splits_and_copies(self):
        class Splittable:
            def __init__(self, items):
                self.items = items

            def split(self, n, equal=True):
                return [Splittable(self.items[i::n]) for i in range(n)]

        shards = DataConfig(datasets_to_split=["train"]).configure(
            {"train": Splittable([0, 1, 2, 3]), "valid": "whole"}, 2
        )
        assert [s["train"].items for s in shards] == [[0, 2], [1, 3]]
        assert [s["valid"] for s in shards] == ["whole", "whole"]
