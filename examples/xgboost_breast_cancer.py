"""The Ray Train material's breast-cancer example: XGBoost on 2 workers, then prediction.

Kept as the material writes it, with ``ray`` changed to ``lockstep``: a dataset from
pandas, a preprocessor chain fitted on it, an XGBoostTrainer with the older actor-style
scaling config and ``label=``, ``trainer.fit(dataset=..., preprocessor=...)``, and the
trained model (with its preprocessor, from ``result.checkpoint``) predicting on the
features-only dataset.

Install and run, from the repository's root:

    pip install -e ".[xgboost,sklearn]"   # scikit-learn for the data
    python examples/xgboost_breast_cancer.py [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

from __future__ import annotations

import argparse

import sklearn.datasets

from lockstep.data import from_pandas
from lockstep.data.preprocessors import Chain, Repartitioner, Scaler
from lockstep.train import RunConfig
from lockstep.train.xgboost import XGBoostTrainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    args = parser.parse_args()

    # Example 6-1: the data
    data_raw = sklearn.datasets.load_breast_cancer(as_frame=True)

    dataset_df = data_raw["data"]
    predict_ds = from_pandas(dataset_df)

    dataset_df["target"] = data_raw["target"]
    dataset = from_pandas(dataset_df)

    # Example 6-2: the preprocessor
    preprocessor = Chain(
        Scaler(["worst radius", "worst area"]),
        Repartitioner(num_partitions=2),
    )

    # Example 6-3: the trainer
    trainer = XGBoostTrainer(
        scaling_config={
            "num_actors": 2,
            "gpus_per_actor": 0,
            "cpus_per_actor": 1,
        },
        label="target",
        params={
            "tree_method": "approx",
            "objective": "binary:logistic",
            "eval_metric": ["logloss", "error"],
        },
        run_config=RunConfig(storage_path=args.storage_path),
    )

    result = trainer.fit(dataset=dataset, preprocessor=preprocessor)

    print(result)

    # Example 6-18: the model, from the checkpoint, predicting
    this_checkpoint = result.checkpoint
    this_model = this_checkpoint.load_model()
    predicted = this_model.predict(predict_ds)
    print(predicted.to_pandas())
    print(f"run directory: {result.path}")


if __name__ == "__main__":
    main()
