"""A local run listens on loopback only: nothing it opens is reachable from the network.

Each test watches the sockets that the driver and every process under it listen on, for
the whole of ``fit()``; and rank 0 looks once more while every worker is set up and none
has torn down (between two collectives), so that the framework's sockets are surely open
then. Where a library binds every interface and gives no way to choose (the README's
"Security" section names them, with the source), the test pins that exception down to
exactly those sockets.
"""

from __future__ import annotations

import dataclasses
import os

import lightgbm
import numpy as np
import xgboost

from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
from lockstep.train.lightgbm import LightGBMTrainer, get_network_params
from lockstep.train.torch import TorchConfig, TorchTrainer
from lockstep.train.xgboost import XGBoostConfig
from tests.helpers import LOOPBACK, EveryRank, listening_now, not_on_loopback, sockets_listened_on
from tests.integration.gbdt_data import datasets

TWO = ScalingConfig(num_workers=2)


def listening_in_run(driver: int) -> list[list]:
    """Run from a worker: what the driver's whole process tree listens on, as JSON."""
    return [[ip, port, pid] for (ip, port), pid in listening_now(driver).items()]


def fit(trainer_cls, fn, run_config, **kwargs):
    """Run ``fn`` on two workers; what listened beyond loopback, and every rank's reports."""
    ranks = EveryRank()
    config = dataclasses.replace(run_config, callbacks=[ranks])
    with sockets_listened_on() as seen:
        trainer_cls(fn, scaling_config=TWO, run_config=config, **kwargs).fit()
    elsewhere = not_on_loopback(seen)
    for step in ranks.steps:
        for metrics in step:
            found = {(ip, port): pid for ip, port, pid in metrics.get("listening", [])}
            elsewhere.update(not_on_loopback(found))
    return elsewhere, ranks.steps


def test_a_run_without_a_framework_listens_on_nothing(run_config):
    driver = os.getpid()

    def train_func():
        train.report({"listening": listening_in_run(driver)})

    ranks = EveryRank()
    config = RunConfig(storage_path=run_config.storage_path, verbose=0, callbacks=[ranks])
    with sockets_listened_on() as seen:
        DataParallelTrainer(train_func, scaling_config=TWO, run_config=config).fit()
    # The driver talks to its workers (and its fork server) over socket pairs: no port.
    assert seen == {}
    assert [m["listening"] for m in ranks.steps[0]] == [[], []]


def test_torch_gloo_listens_on_loopback_only(run_config):
    driver = os.getpid()

    def train_func():
        import torch
        import torch.distributed as dist

        tensor = torch.ones(1)
        dist.all_reduce(tensor)
        listening = listening_in_run(driver) if dist.get_rank() == 0 else []
        dist.barrier()  # no rank tears down before rank 0 has looked
        port = int(os.environ["MASTER_PORT"])
        gloo = os.environ["GLOO_SOCKET_IFNAME"]
        train.report({"sum": tensor.item(), "port": port, "gloo": gloo, "listening": listening})

    elsewhere, steps = fit(
        TorchTrainer, train_func, run_config, torch_config=TorchConfig(backend="gloo")
    )
    ((rank0, rank1),) = steps
    assert rank0["sum"] == rank1["sum"] == 2.0
    seen = {(ip, port) for ip, port, _ in rank0["listening"]}
    assert ("127.0.0.1", rank0["port"]) in seen  # the store, while in use
    assert len(seen) > 1  # and gloo's pairs
    assert rank0["gloo"] == rank1["gloo"] == "lo"  # even where the host name is not local
    assert elsewhere == {}


def test_xgboost_tracker_on_loopback_and_only_xgboosts_worker_listeners_elsewhere(run_config):
    driver = os.getpid()

    def allreduce(value):
        return float(xgboost.collective.allreduce(np.array([value]), xgboost.collective.Op.SUM)[0])

    def train_func():
        total = allreduce(1.0)
        rank = train.get_context().get_world_rank()
        listening = listening_in_run(driver) if rank == 0 else []
        allreduce(0.0)  # no rank leaves the collective before rank 0 has looked
        train.report({"sum": total, "pid": os.getpid(), "listening": listening})

    elsewhere, steps = fit(
        DataParallelTrainer, train_func, run_config, backend_config=XGBoostConfig()
    )
    ((rank0, rank1),) = steps
    assert rank0["sum"] == rank1["sum"] == 2.0
    # The tracker runs in rank 0 and listens on loopback.
    assert any(ip in LOOPBACK and pid == rank0["pid"] for ip, _, pid in rank0["listening"])
    # xgboost's workers bind their two listeners (the ring's bootstrap and the error
    # signal) to the wildcard address, hard-coded in TCPSocket::BindHost: nothing else
    # may listen beyond loopback.
    assert {ip for ip, _ in elsewhere} <= {"0.0.0.0", "::"}
    workers = [rank0["pid"], rank1["pid"]]
    assert set(elsewhere.values()) <= set(workers)
    assert all(list(elsewhere.values()).count(pid) <= 2 for pid in workers)


def test_lightgbm_listens_beyond_loopback_only_on_its_own_ports_while_joining(run_config):
    driver = os.getpid()

    def train_func():
        network = get_network_params()
        frame = train.get_dataset_shard("train").materialize().to_pandas()
        data = lightgbm.Dataset(frame.drop(columns=["target"]), label=frame["target"])
        params = {"objective": "binary", "verbose": -1, "tree_learner": "data"}
        lightgbm.train({**params, **network, "pre_partition": True}, data, num_boost_round=3)
        rank = train.get_context().get_world_rank()
        listening = listening_in_run(driver) if rank == 0 else []
        port = network["local_listen_port"]
        train.report({"port": port, "pid": os.getpid(), "listening": listening})

    elsewhere, steps = fit(
        LightGBMTrainer, train_func, run_config, datasets={"train": datasets()["train"]}
    )
    (ranks,) = steps
    ports = {("0.0.0.0", m["port"]): m["pid"] for m in ranks}
    # LightGBM binds its listener to 0.0.0.0, hard-coded in TcpSocket::Bind, and closes it
    # once the workers are linked: beyond loopback there may be only that, and only then.
    assert elsewhere.items() <= ports.items()
    assert not {(ip, port) for ip, port, _ in ranks[0]["listening"]} & set(ports)
