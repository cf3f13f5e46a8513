"""Ray Train 1.x's PyTorch profiler pair: TorchWorkerProfiler on the workers,
TorchTensorboardProfilerCallback writing their traces on the driver."""

from __future__ import annotations

import json

import torch
from torch.profiler import profile, record_function, schedule

from lockstep import train
from lockstep.train import Trainer
from lockstep.train.callbacks import TBXLoggerCallback, TorchTensorboardProfilerCallback
from lockstep.train.torch import TorchWorkerProfiler


def train_func(config):
    # Ray 1.x's profiler example, with activities left to torch (it refuses an empty list),
    # and one cycle an epoch only (else leaving the profiler writes one more trace).
    twp = TorchWorkerProfiler(trace_dir=config["trace_dir"])
    every_epoch = schedule(wait=0, warmup=0, active=1, repeat=config["epochs"])
    with profile(schedule=every_epoch, on_trace_ready=twp.trace_handler) as p:
        model = train.torch.prepare_model(torch.nn.Linear(1, 1))
        loss_fn = torch.nn.MSELoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(config["epochs"]):
            with record_function("train_epoch"):
                x = torch.randn(16, 1)
                loss = loss_fn(model(x), 2 * x)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            with record_function("train_checkpoint"):
                train.save_checkpoint(epoch=epoch, model_weights=model.module.state_dict())
            p.step()
            with record_function("train_report"):
                train.report(epoch=epoch, loss=loss.item(), **twp.get_and_clear_profile_traces())


def run(tmp_path, callback, epochs=2):
    trainer = Trainer(backend="torch", num_workers=2, logdir=str(tmp_path / "run"))
    trainer.start()
    config = {"epochs": epochs, "trace_dir": str(tmp_path / "worker_traces")}
    trainer.run(train_func, config=config, callbacks=[TBXLoggerCallback(), callback])
    trainer.shutdown()


def test_every_workers_traces_land_in_the_run_directory(tmp_path):
    run(tmp_path, TorchTensorboardProfilerCallback())
    traces = sorted((tmp_path / "run").rglob("pytorch_profiler/*"))
    names = [t.name for t in traces]
    assert names == [f"worker_{r}_epoch_{e}.pt.trace.json" for r in (0, 1) for e in (1, 2)]
    for trace in traces:
        events = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
        assert "train_epoch" in events and "train_checkpoint" in events
    # The workers' own copies are handed over, not left behind.
    assert list((tmp_path / "worker_traces").iterdir()) == []


def test_workers_to_log_and_logdir_choose_which_and_where(tmp_path):
    run(tmp_path, TorchTensorboardProfilerCallback(logdir=str(tmp_path / "mine"), workers_to_log=1))
    names = sorted(t.name for t in (tmp_path / "mine").iterdir())
    assert names == ["worker_1_epoch_1.pt.trace.json", "worker_1_epoch_2.pt.trace.json"]
    assert not list((tmp_path / "run").rglob("pytorch_profiler"))
