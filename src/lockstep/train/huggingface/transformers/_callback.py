"""RayTrainReportCallback and prepare_trainer for ``transformers.Trainer``."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

import transformers
from torch.utils.data import DataLoader, Dataset, IterableDataset

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._session import report


class RayTrainReportCallback(transformers.TrainerCallback):  # type: ignore[misc]
    """Reports each log and evaluation of a ``transformers.Trainer``, and each save with
    the saved checkpoint, to lockstep; as Ray's ``RayTrainReportCallback``.

    The checkpoint holds the Trainer's checkpoint directory under ``checkpoint/``, so that
    ``trainer.train(resume_from_checkpoint=os.path.join(d, "checkpoint"))`` continues from
    it. Metrics are those logged since the last report, with ``step`` and ``epoch``.

    Example:
        >>> callback = RayTrainReportCallback()
        >>> isinstance(callback, transformers.TrainerCallback)
        True
    """

    CHECKPOINT_NAME = "checkpoint"

    def __init__(self) -> None:
        self._pending: dict[str, Any] = {}

    def on_log(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._pending.update(logs or {})
        if not control.should_save:
            # A save follows in the same step otherwise: it reports these with its checkpoint.
            report(self._metrics(state))

    def on_save(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        source = transformers.trainer_utils.get_last_checkpoint(args.output_dir)
        metrics = self._metrics(state)
        if source is None or not state.is_world_process_zero:
            report(metrics)
            return
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(source, os.path.join(tmp, self.CHECKPOINT_NAME))
            report(metrics, checkpoint=Checkpoint.from_directory(tmp))

    def _metrics(self, state: transformers.TrainerState) -> dict[str, Any]:
        metrics = {**self._pending, "step": state.global_step, "epoch": state.epoch}
        self._pending = {}
        return metrics


class _BatchesDataset(IterableDataset[Any]):
    """Batches a lockstep dataset iterator yields (``iter_torch_batches``), one at a time."""

    def __init__(self, batches: Iterable[Any]) -> None:
        self._batches = batches

    def __iter__(self) -> Iterator[Any]:
        return iter(self._batches)


def _is_batches(dataset: Any) -> bool:
    """An iterable of batches (``iter_torch_batches``) rather than a dataset of rows."""
    if dataset is None or isinstance(dataset, Dataset) or hasattr(dataset, "__getitem__"):
        return False
    return hasattr(dataset, "__iter__")


def _loader(batches: Iterable[Any]) -> DataLoader[Any]:
    return DataLoader(_BatchesDataset(batches), batch_size=None)


def prepare_trainer(trainer: transformers.Trainer) -> transformers.Trainer:
    """Make ``trainer`` read lockstep dataset shards; as Ray's ``prepare_trainer``.

    A ``train_dataset``/``eval_dataset`` given as batches of a shard
    (``shard.iter_torch_batches(batch_size=...)``) is read as it is, not re-batched or
    re-sampled (each worker already has its own part); set ``max_steps``, as the length
    is unknown. Datasets of other kinds are left to the Trainer.

    Example:
        >>> prepare_trainer  # doctest: +ELLIPSIS
        <function prepare_trainer at ...>
    """
    base: type[transformers.Trainer] = trainer.__class__

    class LockstepTransformersTrainer(base):  # type: ignore[misc]
        def get_train_dataloader(self) -> DataLoader[Any]:
            if _is_batches(self.train_dataset):
                return _loader(self.train_dataset)
            return super().get_train_dataloader()  # type: ignore[no-any-return]

        def get_eval_dataloader(self, eval_dataset: Any = None) -> DataLoader[Any]:
            dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
            if _is_batches(dataset):
                return _loader(dataset)
            return super().get_eval_dataloader(eval_dataset)  # type: ignore[no-any-return]

        def get_test_dataloader(self, test_dataset: Any) -> DataLoader[Any]:
            if _is_batches(test_dataset):
                return _loader(test_dataset)
            return super().get_test_dataloader(test_dataset)  # type: ignore[no-any-return]

    LockstepTransformersTrainer.__name__ = f"Lockstep{base.__name__}"
    trainer.__class__ = LockstepTransformersTrainer
    return trainer
