"""Bad input fails at construction (or before any worker starts) with the fix in the message."""

import threading

import pytest

from lockstep.train import (
    Checkpoint,
    DataConfig,
    DataParallelTrainer,
    RunConfig,
    ScalingConfig,
)


def noop():
    pass


def test_two_required_arguments():
    def train_func(config, extra):
        pass

    with pytest.raises(ValueError, match=r"takes 2 required arguments \(config, extra\).*HINT"):
        DataParallelTrainer(train_func)


def test_optional_arguments_are_fine():
    def train_func(config=None, *, flag=True):
        pass

    DataParallelTrainer(train_func, run_config=RunConfig(verbose=0))


def test_config_for_a_function_without_arguments_is_not_passed(tmp_path):
    # as Ray: the function is called without the config
    result = DataParallelTrainer(
        lambda: "called",
        train_loop_config={"lr": 0.1},
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert result.return_value == "called"


def test_checkpoint_frequency_on_a_training_function_is_an_error():
    from lockstep.train import CheckpointConfig

    config = RunConfig(checkpoint_config=CheckpointConfig(checkpoint_frequency=2))
    with pytest.raises(ValueError, match=r"checkpoint_frequency=2\) cannot be honoured.*HINT"):
        DataParallelTrainer(noop, run_config=config)


def test_not_callable():
    with pytest.raises(ValueError, match="must be a function"):
        DataParallelTrainer("train.py")  # type: ignore[arg-type]


def test_unpicklable_config_names_the_entry():
    with pytest.raises(ValueError, match=r"train_loop_config\['lock'\]"):
        DataParallelTrainer(lambda config: None, train_loop_config={"lock": threading.Lock()})


def test_unpicklable_capture_names_the_variable():
    lock = threading.Lock()
    with pytest.raises(ValueError, match=r"variable 'lock' used by"):
        DataParallelTrainer(lambda: lock)


def test_config_must_be_a_dict():
    with pytest.raises(ValueError, match="train_loop_config must be a dict"):
        DataParallelTrainer(lambda config: None, train_loop_config=[1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scaling_config": {"num_workers": -1}}, "num_workers must be >= 0"),
        ({"scaling_config": {"num_workers": 1.5}}, "num_workers must be an integer"),
        ({"run_config": {"name": "x"}}, "run_config must be a RunConfig"),
        ({"resume_from_checkpoint": "/tmp/ckpt"}, "resume_from_checkpoint must be a Checkpoint"),
        ({"dataset_config": {"datasets_to_split": "all"}}, "dataset_config must be a DataConfig"),
        ({"metadata": {"f": noop}}, "metadata must be JSON-serialisable"),
        ({"datasets": {"train": [1, 2]}}, "cannot be split across workers"),
        (
            {
                "datasets": {"train": [1, 2]},
                "dataset_config": DataConfig(datasets_to_split=["valid"]),
            },
            r"names \['valid'\]",
        ),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataParallelTrainer(noop, **kwargs)


def test_storage_path_not_writable_fails_before_any_worker(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    trainer = DataParallelTrainer(
        noop, run_config=RunConfig(storage_path=str(blocker / "runs"), verbose=0)
    )
    with pytest.raises(ValueError, match=r"storage_path .* is not writable.*HINT"):
        trainer.fit()


def test_process_workers_cannot_share_memory_storage():
    # Caught at construction: a forked worker could even see a stale copy of the driver's
    # memory filesystem, so the workers' own check cannot be relied on for memory://.
    with pytest.raises(ValueError, match=r"memory:///?lockstep-validation.*num_workers=0"):
        DataParallelTrainer(
            noop,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path="memory://lockstep-validation", name="m"),
        )


def test_placement_options_warn_on_local_processes():
    with pytest.warns(UserWarning, match="placement_strategy='SPREAD' only matters on a Ray"):
        DataParallelTrainer(
            noop, scaling_config=ScalingConfig(num_workers=2, placement_strategy="SPREAD")
        )


def test_name_and_storage_are_resolved_at_construction(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = DataParallelTrainer(noop, run_config=RunConfig(storage_path="runs"))
    assert trainer.run_config.storage_path == str(tmp_path / "runs")
    assert trainer.run_config.name.startswith("lockstep_run-")
    other = DataParallelTrainer(noop, run_config=RunConfig(storage_path="runs"))
    assert other.run_config.name != trainer.run_config.name


def test_checkpoint_from_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Checkpoint.from_directory(tmp_path / "missing")
