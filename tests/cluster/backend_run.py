"""A 2-worker run of one framework backend, as a user runs it under a launcher, for the
multi-node tests: TensorFlow, XGBoost, LightGBM or Horovod.

Every launched process runs it; each worker writes what its framework saw across the
workers to ``OUT/BACKEND-rank<R>.json``: its host, the addresses its framework was given,
and the result of a collective (a sum of rank + 1) or of training on its own shard. The
code after ``fit()`` writes ``OUT/after-fit-<host>-<pid>.json`` (once, in the driver).

    python backend_run.py BACKEND --out OUT --storage STORAGE

The GBDT backends train on shards with the same feature x (64 values in [0, 1]) and the
label 10 * rank + 4 * (x > 0.5): a model trained on both predicts 5 below x = 0.5 and 9
above; one trained on a single shard would predict 0 and 4, or 10 and 14.
"""

from __future__ import annotations

import argparse
import json
import os
import socket

from lockstep import train
from lockstep.train import RunConfig, ScalingConfig

ROWS = 64  # per worker
PROBE = [[0.25], [0.75]]  # where the models are asked


def _write(out: str, backend: str, seen: dict) -> None:
    context = train.get_context()
    seen |= {"rank": context.get_world_rank(), "host": socket.gethostname()}
    with open(os.path.join(out, f"{backend}-rank{seen['rank']}.json"), "w") as f:
        json.dump(seen, f)


def _shard():
    """This worker's rows: the same feature on every worker, labels of its own."""
    import numpy as np

    rank = train.get_context().get_world_rank()
    x = np.linspace(0.0, 1.0, ROWS).reshape(-1, 1)
    return x, 10.0 * rank + 4.0 * (x[:, 0] > 0.5)


def tensorflow_loop(config: dict) -> None:
    import tensorflow as tf

    tf_config = json.loads(os.environ["TF_CONFIG"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = train.get_context().get_world_rank()
    per_replica = strategy.run(lambda: tf.constant(rank + 1.0))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    _write(config["out"], "tensorflow", {"tf_config": tf_config, "sum": float(total.numpy())})
    train.report({"sum": float(total.numpy())})


def xgboost_loop(config: dict) -> None:
    import hashlib

    import numpy as np
    import xgboost

    from lockstep.train.xgboost import RayTrainReportCallback

    x, y = _shard()
    params = {"objective": "reg:squarederror", "max_depth": 2, "eta": 1.0}
    rows = xgboost.DMatrix(x, label=y)
    booster = xgboost.train(
        params, rows, num_boost_round=2, evals=[(rows, "train")],
        callbacks=[RayTrainReportCallback()],
    )  # fmt: skip
    total = xgboost.collective.allreduce(np.array([xgboost.collective.get_rank() + 1.0]),
                                         xgboost.collective.Op.SUM)  # fmt: skip
    seen = {
        "world_size": xgboost.collective.get_world_size(),
        "sum": float(total[0]),
        "predictions": booster.predict(xgboost.DMatrix(PROBE)).tolist(),
        "model": hashlib.sha256(booster.save_raw("json")).hexdigest(),
    }
    _write(config["out"], "xgboost", seen)


def lightgbm_loop(config: dict) -> None:
    import hashlib

    import lightgbm

    from lockstep.train.lightgbm import RayTrainReportCallback, get_network_params

    x, y = _shard()
    network = get_network_params()
    params = {"objective": "regression", "tree_learner": "data", "learning_rate": 1.0,
              "min_data_in_leaf": 1, "verbose": -1, **network}  # fmt: skip
    rows = lightgbm.Dataset(x, label=y)
    booster = lightgbm.train(
        params, rows, num_boost_round=2, valid_sets=[rows], valid_names=["train"],
        callbacks=[RayTrainReportCallback()],
    )  # fmt: skip
    seen = {
        "network": network,
        "predictions": booster.predict(PROBE).tolist(),
        # the trees: the model's text holds this worker's own parameters too (its port)
        "model": hashlib.sha256(json.dumps(booster.dump_model()["tree_info"]).encode()).hexdigest(),
    }
    _write(config["out"], "lightgbm", seen)


def horovod_loop(config: dict) -> None:
    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum)
    variables = ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_IFACE")
    seen = {
        "sizes": [hvd.size(), hvd.local_size(), hvd.cross_size()],
        "sum": float(total.item()),
        "env": {k: os.environ[k] for k in variables},
    }
    _write(config["out"], "horovod", seen)
    train.report({"sum": seen["sum"]})


def trainer(backend: str, out: str, storage: str):
    options = {
        "train_loop_config": {"out": out},
        "scaling_config": ScalingConfig(num_workers=2),
        "run_config": RunConfig(name=backend, storage_path=storage, verbose=0),
    }
    if backend == "tensorflow":
        from lockstep.train.tensorflow import TensorflowTrainer

        return TensorflowTrainer(tensorflow_loop, **options)
    if backend == "xgboost":
        from lockstep.train.xgboost import XGBoostTrainer

        return XGBoostTrainer(xgboost_loop, **options)
    if backend == "lightgbm":
        from lockstep.train.lightgbm import LightGBMTrainer

        return LightGBMTrainer(lightgbm_loop, **options)
    from lockstep.train.horovod import HorovodTrainer

    return HorovodTrainer(horovod_loop, **options)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=["tensorflow", "xgboost", "lightgbm", "horovod"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--storage", required=True)
    args = parser.parse_args()
    result = trainer(args.backend, args.out, args.storage).fit()
    host = socket.gethostname()
    with open(os.path.join(args.out, f"after-fit-{host}-{os.getpid()}.json"), "w") as f:
        json.dump({"host": host, "metrics": result.metrics}, f)


if __name__ == "__main__":
    main()
