"""Horovod (gloo controller) under HorovodTrainer: the horovodrun environment, gradient
averaging, and what listens during a run."""

from __future__ import annotations

import dataclasses

import horovod.torch as hvd
import pytest
import torch

from lockstep import train
from lockstep.train import ScalingConfig
from lockstep.train.horovod import HorovodConfig, HorovodTrainer
from tests.contracts.backend import BackendContract
from tests.helpers import EveryRank, listening_addresses


class EveryRankAndItsSockets(EveryRank):
    """Also the addresses the workers listen on, at every report."""

    def __init__(self):
        super().__init__()
        self.listening: set[str] = set()

    def after_report(self, run_context, metrics, checkpoint):
        super().after_report(run_context, metrics, checkpoint)
        self.listening |= listening_addresses()


def fit(fn, run_config, callback, num_workers=2, **kwargs):
    run = dataclasses.replace(run_config, callbacks=[callback])
    return HorovodTrainer(
        fn, scaling_config=ScalingConfig(num_workers=num_workers), run_config=run, **kwargs
    ).fit()


class TestHorovodBackend(BackendContract):
    @pytest.fixture
    def backend_config(self):
        return HorovodConfig(timeout_s=60)

    @staticmethod
    def probe():
        hvd.init()
        total = hvd.allreduce(torch.ones(1), op=hvd.Sum)
        return [hvd.rank(), hvd.size(), total.item()]

    def check_probe(self, results, world_size):
        assert results == [[r, world_size, float(world_size)] for r in range(world_size)]


def test_workers_get_the_environment_horovodrun_gloo_sets(run_config):
    ranks = EveryRankAndItsSockets()

    def train_func():
        import os

        train.report({k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")})

    fit(train_func, run_config, ranks)
    first, second = ranks.steps[0]
    assert [(m["HOROVOD_RANK"], m["HOROVOD_LOCAL_RANK"]) for m in (first, second)] == [
        ("0", "0"),
        ("1", "1"),
    ]
    for m in (first, second):
        assert m["HOROVOD_SIZE"] == m["HOROVOD_LOCAL_SIZE"] == "2"
        assert (m["HOROVOD_CROSS_RANK"], m["HOROVOD_CROSS_SIZE"]) == ("0", "1")
        assert m["HOROVOD_CONTROLLER"] == m["HOROVOD_CPU_OPERATIONS"] == "gloo"
        assert m["HOROVOD_GLOO_IFACE"] == "lo"
        assert m["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
    assert first["HOROVOD_GLOO_RENDEZVOUS_PORT"] == second["HOROVOD_GLOO_RENDEZVOUS_PORT"]


def test_torch_gradients_are_averaged_and_parameters_match_after_a_step(run_config):
    """Each rank has its own batch; after one step both hold the same parameters, namely
    those of one SGD step on the mean of the two ranks' gradients."""
    ranks = EveryRankAndItsSockets()

    def batch(rank):
        generator = torch.Generator().manual_seed(10 + rank)
        return torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator)

    def start_model():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 1)

    def expected_after_step():
        grads = []
        for rank in range(2):
            model = start_model()
            x, y = batch(rank)
            torch.nn.functional.mse_loss(model(x), y).backward()
            grads.append([p.grad for p in model.parameters()])
        with torch.no_grad():
            return [
                (p - 0.1 * (g0 + g1) / 2).tolist()
                for p, g0, g1 in zip(start_model().parameters(), *grads, strict=True)
            ]

    def train_func():
        hvd.init()
        model = start_model() if hvd.rank() == 0 else torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # rank 1 starts as rank 0
        x, y = batch(hvd.rank())
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        params = [p.detach().tolist() for p in model.parameters()]
        train.report({"params": params, "expected": expected_after_step()})

    fit(train_func, run_config, ranks)
    first, second = ranks.steps[0]
    assert first["params"] == second["params"]  # identical on both ranks
    for got, want in zip(first["params"], first["expected"], strict=True):
        assert torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-6)


def test_during_fit_every_listening_socket_is_on_loopback(run_config):
    ranks = EveryRankAndItsSockets()

    def train_func():
        hvd.init()
        for step in range(2):
            hvd.allreduce(torch.ones(4))
            train.report({"step": step})

    fit(train_func, run_config, ranks)
    assert ranks.listening  # the rendezvous server and gloo's pairs were seen
    hosts = {a.rsplit(":", 1)[0] for a in ranks.listening}
    assert hosts <= {"127.0.0.1", "::1"}, ranks.listening


def test_horovod_config_refuses_a_string_of_nics():
    with pytest.raises(ValueError, match="HINT"):
        HorovodConfig(nics="eth0")


def test_keras_weights_are_identical_on_both_ranks_after_fit(run_config):
    """The material's Horovod Keras script: Adam scaled by hvd.size(), DistributedOptimizer,
    compile with experimental_run_tf_function=False, BroadcastGlobalVariablesCallback(0),
    each rank on its own part of the data; both end with the same weights."""
    ranks = EveryRankAndItsSockets()

    def train_func():
        import horovod.tensorflow.keras as hvd
        import numpy as np
        import tensorflow as tf

        # Initialize Horovod
        hvd.init()
        rng = np.random.default_rng(0)
        x = rng.normal(size=(64, 4)).astype("float32")
        y = (x.sum(axis=1) > 0).astype("int64")
        dataset = np.array_split(np.arange(64), hvd.size())[hvd.rank()]
        tf.keras.utils.set_random_seed(hvd.rank())  # different starts: the broadcast fixes it
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
        opt = tf.optimizers.Adam(0.001 * hvd.size())
        opt = hvd.DistributedOptimizer(opt)
        model.compile(
            loss=tf.losses.SparseCategoricalCrossentropy(from_logits=True),
            optimizer=opt,
            metrics=["accuracy"],
            experimental_run_tf_function=False,
        )
        callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
        model.fit(x[dataset], y[dataset], batch_size=8, epochs=2, callbacks=callbacks, verbose=0)
        train.report({"weights": [w.tolist() for w in model.get_weights()]})

    fit(train_func, run_config, ranks)
    first, second = ranks.steps[0]
    assert first["weights"] == second["weights"]
