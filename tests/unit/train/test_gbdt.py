"""The GBDT trainers' classic form: bad input fails at construction, naming the columns."""

import pandas as pd
import pytest

import lockstep.data as ld
from lockstep.train import RunConfig, ScalingConfig
from lockstep.train._gbdt import parse_eval
from lockstep.train.lightgbm import LightGBMTrainer
from lockstep.train.xgboost import RayTrainReportCallback, XGBoostTrainer

# These tests ask for more CPUs per worker than a small machine has, on purpose: they check
# the parameters a trainer derives, and start no worker to share the CPUs.
MORE_CPUS_THAN_HERE = pytest.mark.filterwarnings("ignore:ScalingConfig asks for .* CPUs")

TRAINERS = [XGBoostTrainer, LightGBMTrainer]


@pytest.fixture
def frame():
    return pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [0.5, 0.1, 0.2, 0.3], "y": [0, 1, 0, 1]})


@pytest.fixture
def datasets(frame):
    return {"train": ld.from_pandas(frame), "valid": ld.from_pandas(frame)}


def quiet():
    return RunConfig(verbose=0)


@pytest.mark.parametrize("trainer", TRAINERS)
def test_missing_label_column_lists_the_columns(trainer, datasets):
    with pytest.raises(ValueError, match=r"needs label_column.*\['a', 'b', 'y'\].*HINT"):
        trainer(datasets=datasets, params={})


@pytest.mark.parametrize("trainer", TRAINERS)
def test_missing_label_column_without_datasets(trainer):
    with pytest.raises(ValueError, match=r"needs label_column, the column to predict\. HINT"):
        trainer(params={})


@pytest.mark.parametrize("trainer", TRAINERS)
def test_label_absent_from_a_dataset_lists_its_columns(trainer, frame, datasets):
    datasets["valid"] = ld.from_pandas(frame.drop(columns=["y"]))
    with pytest.raises(
        ValueError,
        match=r"'y' is not a column of datasets\['valid'\]; its columns are \['a', 'b'\]",
    ):
        trainer(datasets=datasets, label_column="y")


@pytest.mark.parametrize("trainer", TRAINERS)
def test_label_absent_is_found_from_the_schema_without_reading_rows(trainer, tmp_path, frame):
    frame.to_parquet(tmp_path / "part.parquet")
    dataset = ld.read_parquet(str(tmp_path))
    with pytest.raises(ValueError, match=r"'target' is not a column.*\['a', 'b', 'y'\]"):
        trainer(datasets={"train": dataset}, label_column="target")


@pytest.mark.parametrize("trainer", TRAINERS)
def test_label_absent_from_datasets_given_to_fit(trainer, frame):
    fitted = trainer(label_column="target", run_config=quiet())
    with pytest.raises(ValueError, match=r"'target' is not a column of datasets\['train'\]"):
        fitted.fit(dataset=ld.from_pandas(frame))


@pytest.mark.parametrize("trainer", TRAINERS)
def test_no_train_dataset(trainer, datasets):
    with pytest.raises(ValueError, match=r"trains on datasets\['train'\].*\['test'\].*HINT"):
        trainer(datasets={"test": datasets["valid"]}, label_column="y")


@pytest.mark.parametrize("trainer", TRAINERS)
def test_no_dataset_at_all_fails_at_fit(trainer):
    with pytest.raises(ValueError, match=r"the datasets given are none"):
        trainer(label_column="y", run_config=quiet()).fit()


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"params": [("max_depth", 3)]}, r"params=\.\.\.\) must be a dict.*HINT"),
        ({"num_boost_round": 0}, "num_boost_round must be >= 1"),
        ({"num_boost_round": 2.5}, r"num_boost_round=\.\.\.\) must be an integer"),
        ({"dmatrix_params": {"train": 3}}, "takes a dict of dataset name to a dict"),
        ({"dmatrix_params": {"test": {}}}, r"names dataset 'test'.*\['train', 'valid'\]"),
        ({"label": "b", "label_column": "y"}, "label is the older name of label_column"),
        ({"train_loop_config": {"lr": 1}}, "train_loop_config but no train_loop_per_worker"),
    ],
)
def test_bad_classic_arguments(trainer, datasets, kwargs, message):
    with pytest.raises(ValueError, match=message):
        trainer(datasets=datasets, **{"label_column": "y", **kwargs})


@pytest.mark.parametrize("trainer", TRAINERS)
def test_a_function_and_classic_arguments_together(trainer):
    with pytest.raises(ValueError, match=r"also \['label_column', 'params'\].*HINT: either"):
        trainer(lambda: None, label_column="y", params={})


@pytest.mark.parametrize("trainer", TRAINERS)
def test_label_is_the_older_name_of_label_column(trainer, datasets):
    built = trainer(datasets=datasets, label="y", run_config=quiet())
    assert built._worker_setup().config["label_column"] == "y"


@MORE_CPUS_THAN_HERE
@pytest.mark.parametrize("trainer", TRAINERS)
def test_the_older_dict_scaling_config(trainer, datasets):
    built = trainer(
        datasets=datasets,
        label_column="y",
        scaling_config={"num_actors": 2, "cpus_per_actor": 2, "gpus_per_actor": 0},
        run_config=quiet(),
    )
    assert built.scaling_config == ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2})


@MORE_CPUS_THAN_HERE
@pytest.mark.parametrize(
    ("trainer", "threads"), [(XGBoostTrainer, "nthread"), (LightGBMTrainer, "num_threads")]
)
def test_threads_default_to_the_worker_cpus_unless_set(trainer, threads, datasets):
    scaling = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 3})
    built = trainer(datasets=datasets, label_column="y", scaling_config=scaling)
    assert built._classic_params({})[threads] == 3
    assert built._classic_params({threads: 1})[threads] == 1


def test_lightgbm_classic_form_trains_data_parallel_on_partitions(datasets):
    built = LightGBMTrainer(
        datasets=datasets, label_column="y", scaling_config=ScalingConfig(num_workers=2)
    )
    params = built._classic_params({"tree": "voting"})
    assert params["pre_partition"] is True and params["tree"] == "voting"
    assert "tree_learner" not in params
    assert built._classic_params({})["tree_learner"] == "data"


class TestReportCallbackArguments:
    def policy(self, **kwargs):
        return RayTrainReportCallback(**kwargs)

    def test_every_metric_by_default(self):
        assert self.policy()._select({"train-a": 1.0, "valid-a": 2.0}) == {
            "train-a": 1.0,
            "valid-a": 2.0,
        }

    @pytest.mark.parametrize(
        ("metrics", "expected"),
        [
            ("valid-a", {"valid-a": 2.0}),
            (["valid-a", "missing"], {"valid-a": 2.0}),
            ({"loss": "train-a"}, {"loss": 1.0}),
        ],
    )
    def test_selected_and_renamed(self, metrics, expected):
        assert self.policy(metrics=metrics)._select({"train-a": 1.0, "valid-a": 2.0}) == expected

    def test_postprocessing(self):
        policy = self.policy(results_postprocessing_fn=lambda m: {"sum": sum(m.values())})
        assert policy._select({"x": 1.0, "y": 2.0}) == {"sum": 3.0}

    def test_frequency_counts_rounds_of_the_booster(self):
        policy = self.policy(frequency=5)
        assert [r for r in range(1, 16) if policy._due(r)] == [5, 10, 15]
        assert not any(self.policy()._due(r) for r in range(1, 16))

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"frequency": -1}, "frequency must be a number of rounds >= 0"),
            ({"metrics": 3}, "metrics must be a metric name"),
            ({"filename": "a/b.ubj"}, "filename must be a file name"),
            ({"results_postprocessing_fn": "max"}, "results_postprocessing_fn must be a function"),
        ],
    )
    def test_bad_arguments(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            self.policy(**kwargs)


def test_parse_eval():
    assert parse_eval("[9]\ttrain-logloss:0.25\tvalid-error:0") == {
        "train-logloss": 0.25,
        "valid-error": 0.0,
    }


@MORE_CPUS_THAN_HERE
@pytest.mark.parametrize("trainer", TRAINERS)
def test_the_backend_defaults_threads_to_the_worker_cpus(trainer, datasets):
    scaling = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2})
    built = trainer(datasets=datasets, label_column="y", scaling_config=scaling)
    backend_config = built._worker_setup().backend_config
    assert backend_config.num_threads == 2
    config = type(backend_config)(num_threads=1)
    key = "xgboost_config" if trainer is XGBoostTrainer else "lightgbm_config"
    built = trainer(lambda: None, scaling_config=scaling, **{key: config})
    assert built._worker_setup().backend_config.num_threads == 1
    with pytest.raises(ValueError, match="num_threads must be a positive int or None"):
        type(config)(num_threads=0)
