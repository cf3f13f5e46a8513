"""`lockstep demo`: a small ConvNet on scikit-learn's 8x8 digits, on 2 local workers.

Nothing to download: the digits ship with scikit-learn. Checkpoints are kept by validation
accuracy, progress is shown live, and a plot of loss and accuracy per epoch is written into
the run directory.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from lockstep import train
from lockstep.train import CheckpointConfig, Result, RunConfig, ScalingConfig

PLOT_FILE = "training_curves.png"


def load_digits(split: str, limit: int | None = None) -> tuple[Any, Any]:
    """The digits as ``(images [N, 1, 8, 8] in 0..1, labels)``; 80/20 train/validation."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits as sklearn_digits

    digits = sklearn_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    cut = int(0.8 * len(order))
    rows = order[:cut] if split == "train" else order[cut:]
    rows = rows[:limit] if limit else rows
    images = torch.tensor(digits.images[rows] / 16.0, dtype=torch.float32).unsqueeze(1)
    return images, torch.tensor(digits.target[rows], dtype=torch.long)


def build_model() -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Flatten(),
        nn.Dropout(0.25),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def train_func(config: dict[str, Any]) -> None:
    """One worker's part: trains on its shard, validates on its shard, reports the means."""
    import random

    import numpy as np
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from lockstep.train.torch import prepare_data_loader, prepare_model

    limit = config.get("limit")
    # The same seed on every rank and every generator: the same initial weights and dropout
    # masks, so that two runs with one seed draw the same curves (the samplers shuffle by
    # seed and epoch). A resumed run continues from the generators' state in the checkpoint
    # instead (_resume).
    seed = config.get("seed", 0)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    train_set = TensorDataset(*load_digits("train", limit))
    valid_set = TensorDataset(*load_digits("valid", limit))
    train_loader: Any = prepare_data_loader(
        DataLoader(train_set, batch_size=config["batch_size"], shuffle=True)
    )
    valid_loader = prepare_data_loader(DataLoader(valid_set, batch_size=256))
    model = prepare_model(build_model())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    start = _resume(model, optimizer)
    for epoch in range(start, config["epochs"]):
        for fault in config.get("faults", ()):  # what a recovery test injects (lockstep.testing)
            fault.fire_if_due(epoch)
        train_loader.sampler.set_epoch(epoch)
        model.train()
        loss_sum, seen = 0.0, 0
        for images, labels in train_loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            loss_sum, seen = loss_sum + loss.item() * len(labels), seen + len(labels)
        val_loss, val_accuracy = _validate(model, valid_loader)
        metrics = {
            "epoch": epoch,
            "train_loss": _mean_over_workers(loss_sum, seen),
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
        }
        _report_with_checkpoint(metrics, model, optimizer)


def _validate(model: Any, loader: Any) -> tuple[float, float]:
    import torch

    model.eval()
    loss_sum, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for images, labels in loader:
            logits = model(images)
            loss_sum += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += int((logits.argmax(dim=1) == labels).sum())
            seen += len(labels)
    return _mean_over_workers(loss_sum, seen), _mean_over_workers(correct, seen)


def _mean_over_workers(total: float, count: int) -> float:
    """A mean over every worker's samples, not just this one's."""
    import torch
    import torch.distributed as dist

    both = torch.tensor([float(total), float(count)], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(both)
    return float(both[0] / both[1].clamp(min=1.0))


def _resume(model: Any, optimizer: Any) -> int:
    """The epoch to continue from; the model, the optimizer and the random generators
    (dropout's, the loaders') as they were when the checkpoint was saved."""
    import torch

    checkpoint = train.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "model.pt"), weights_only=True)
        train.load_rng_state(d)
    getattr(model, "module", model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"]) + 1


def _report_with_checkpoint(metrics: dict[str, Any], model: Any, optimizer: Any) -> None:
    import torch

    with tempfile.TemporaryDirectory() as d:
        if train.get_context().get_world_rank() == 0:
            state = {
                "model": getattr(model, "module", model).state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": metrics["epoch"],
            }
            torch.save(state, os.path.join(d, "model.pt"))
        train.save_rng_state(d)  # every rank's: each draws its own dropout masks
        train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))


def run_demo(**options: Any) -> Result:
    """Train the demo model (options as :func:`demo_trainer`'s); returns the run's Result."""
    result: Result = demo_trainer(**options).fit()
    return result


def demo_trainer(
    *,
    epochs: int = 15,
    num_workers: int = 2,
    storage_path: str | None = None,
    name: str = "demo",
    limit: int | None = None,
    verbose: int = 1,
    seed: int = 0,
    resume_hint: str | None = None,
) -> Any:
    """The demo's TorchTrainer.

    ``storage_path`` None is the default storage place, ``~/lockstep_results`` unless
    ``LOCKSTEP_STORAGE_PATH`` says otherwise.
    """
    from lockstep.train.torch import TorchTrainer

    class DemoTrainer(TorchTrainer):
        def _resume_hint(self, run_dir: Any) -> str:
            return resume_hint or super()._resume_hint(run_dir)

    return DemoTrainer(
        train_func,
        train_loop_config={
            "epochs": epochs,
            "lr": 0.003,
            "batch_size": 32,
            "limit": limit,
            "seed": seed,
        },
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            checkpoint_config=CheckpointConfig(
                num_to_keep=2,
                checkpoint_score_attribute="val_accuracy",
                checkpoint_score_order="max",
            ),
            verbose=verbose,
            progress_total=epochs,
        ),
    )


def plot(result: Result) -> str:
    """Loss and accuracy per epoch, as a PNG in the run directory; returns its path."""
    import matplotlib.pyplot as plt

    figure = draw(result)
    path = os.path.join(result.path, PLOT_FILE)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def draw(result: Result) -> Any:
    """The figure of :func:`plot`: the axes fit the data (an accuracy between 0.9 and 1 is
    not squashed into 0-1), and the best epoch, the best checkpoint's, is marked on both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    from lockstep.cli._runs import whole_numbers_on_x

    frame = result.metrics_dataframe
    assert frame is not None, "the run reported nothing"
    figure, (losses, accuracy) = plt.subplots(1, 2, figsize=(10, 4))
    losses.plot(frame["epoch"], frame["train_loss"], marker="o", label="train")
    losses.plot(frame["epoch"], frame["val_loss"], marker="o", label="validation")
    losses.set(title="Loss", xlabel="epoch", ylabel="cross-entropy")
    accuracy.plot(frame["epoch"], frame["val_accuracy"], marker="o", color="tab:green")
    accuracy.set(
        title="Validation accuracy", xlabel="epoch", ylim=fitted_limits(frame["val_accuracy"])
    )
    accuracy.yaxis.set_major_formatter(PercentFormatter(1.0))
    best = best_epoch(result)
    if best is not None:
        value = float(frame[frame["epoch"] == best]["val_accuracy"].iloc[-1])
        for axes in (losses, accuracy):
            axes.axvline(
                best, color="grey", linestyle="--", linewidth=1, label=f"best: epoch {best}"
            )
        accuracy.plot([best], [value], marker="*", markersize=14, color="tab:red")
        accuracy.annotate(
            f"{value:.1%}", (best, value), textcoords="offset points", xytext=(0, 10), ha="center"
        )
    for axes in (losses, accuracy):
        whole_numbers_on_x(axes, list(frame["epoch"]))
    losses.legend()
    accuracy.legend(loc="lower right")
    figure.tight_layout()
    return figure


def fitted_limits(values: Any, margin: float = 0.1) -> tuple[float, float]:
    """Axis limits around ``values`` with a margin, kept inside 0..1 (for accuracies).

    Example:
        >>> fitted_limits([0.92, 0.96, 0.98])
        (0.914, 0.986)
    """
    low, high = float(min(values)), float(max(values))
    pad = max((high - low) * margin, 0.005)
    return round(max(0.0, low - pad), 6), round(min(1.0, high + pad), 6)


def best_epoch(result: Result) -> int | None:
    """The epoch of the best checkpoint (by validation accuracy), or None."""
    if not result.best_checkpoints:
        return None
    _, metrics = result.best_checkpoints[-1]
    return int(metrics["epoch"])
