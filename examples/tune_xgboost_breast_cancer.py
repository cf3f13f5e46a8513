"""The Ray Train material's Tune example (6-17): an XGBoostTrainer tuned by Tune.

Kept as the material writes it, with ``ray`` changed to ``lockstep``: the trainer's
scaling config (in the older actor form) and its preprocessor are searched like any
hyperparameter, beside xgboost's own ``params``; the Tuner is built in the older form
(``run_config={}``, ``name=``, ``callbacks=``) and given the datasets in ``fit()``.

The material does not show its ``StopperCallback``; Ray's tests define it so: at the start
of a step of the experiment's loop (``on_step_begin``) it raises once ``fail_after_finished``
trials have finished, which interrupts ``Tuner.fit()`` as a crash of the driver would. The
experiment named ``tuner_resume`` is then continued with ``Tuner.restore``: the finished
trials are not run again.

Install and run, from the repository's root:

    pip install -e ".[tune,xgboost,sklearn]"   # scikit-learn for the data
    python examples/tune_xgboost_breast_cancer.py [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

from __future__ import annotations

import argparse
import os

import sklearn.datasets

from lockstep import tune
from lockstep.data import from_pandas
from lockstep.data.preprocessors import Chain, Repartitioner, Scaler
from lockstep.train.xgboost import XGBoostTrainer


class StopperCallback(tune.Callback):
    """Interrupts the experiment once ``fail_after_finished`` trials have finished."""

    def __init__(self, fail_after_finished: int) -> None:
        self.fail_after_finished = int(fail_after_finished)

    def on_step_begin(self, iteration, trials, **info):  # type: ignore[no-untyped-def]
        finished = [t for t in trials if t.status == "TERMINATED"]
        if len(finished) == self.fail_after_finished:
            raise RuntimeError(f"Failing after {len(finished)} finished trial(s).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    args = parser.parse_args()
    # Where RunConfig(storage_path=...) is not given, as in the material's Tuner.
    if args.storage_path:
        os.environ["LOCKSTEP_STORAGE_PATH"] = os.path.abspath(args.storage_path)

    # Examples 6-1 and 6-2: the data and the preprocessor
    data_raw = sklearn.datasets.load_breast_cancer(as_frame=True)
    dataset_df = data_raw["data"]
    dataset_df["target"] = data_raw["target"]
    dataset = from_pandas(dataset_df)
    preprocessor = Chain(
        Scaler(["worst radius", "worst area"]),
        Repartitioner(num_partitions=2),
    )

    # Example 6-17
    fail_after_finished = True
    prep_v1 = preprocessor
    prep_v2 = preprocessor

    param_space = {
        "scaling_config": {
            "num_actors": tune.grid_search([2, 4]),
            "cpus_per_actor": 2,
            "gpus_per_actor": 0,
        },
        "preprocessor": tune.grid_search([prep_v1, prep_v2]),
        # "datasets": {
        #     "train_dataset": tune.grid_search([dataset_v1, dataset_v2]),
        # },
        "params": {
            "objective": "binary:logistic",
            "tree_method": "approx",
            "eval_metric": ["logloss", "error"],
            "eta": tune.loguniform(1e-4, 1e-1),
            "subsample": tune.uniform(0.5, 1.0),
            "max_depth": tune.randint(1, 9),
        },
    }
    if fail_after_finished > 0:
        callbacks = [StopperCallback(fail_after_finished=fail_after_finished)]
    else:
        callbacks = None
    trainer = XGBoostTrainer(
        run_config={"max_actor_restarts": 1},
        scaling_config=None,
        resume_from_checkpoint=None,
        label="target",
    )
    tuner = tune.Tuner(
        trainer,
        run_config={},
        param_space=param_space,
        name="tuner_resume",
        callbacks=callbacks,
    )
    try:
        results = tuner.fit(datasets={"train_dataset": dataset})
    except RuntimeError as interrupted:
        # The experiment's state survived the interruption: continue it.
        storage = os.environ.get("LOCKSTEP_STORAGE_PATH", "~/lockstep_results")
        path = os.path.join(os.path.expanduser(storage), "tuner_resume")
        print(f"{interrupted}; restoring {path}")
        tuner = tune.Tuner.restore(path, trainable=trainer)
        results = tuner.fit(datasets={"train_dataset": dataset})
    print(results.results)

    best = results.get_best_result(metric="train-error", mode="min")
    print("best config:", best.config["params"], best.metrics["train-error"])
    assert results.num_terminated == 4 and results.num_errors == 0


if __name__ == "__main__":
    main()
