"""A transformers.Trainer under TorchTrainer: reports, checkpoints, and resumes from them."""

from __future__ import annotations

import os

import pytest

from lockstep import train
from lockstep.train import RunConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer
from tests.helpers import tiny_bert

pytestmark = pytest.mark.slow


def train_func(config):
    import torch
    import transformers

    from lockstep.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    model = tiny_bert()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 32, (64, 8), generator=generator)
    data = [{"input_ids": row, "labels": int(row[0] % 2)} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=config["output_dir"],
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        max_steps=config["max_steps"],
        logging_steps=2,
        save_steps=4,
        eval_strategy="steps",
        eval_steps=4,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=data,
        eval_dataset=data[:16],
        callbacks=[RayTrainReportCallback()],
    )
    trainer = prepare_trainer(trainer)
    checkpoint = train.get_checkpoint()
    if checkpoint is None:
        trainer.train()
        return
    with checkpoint.as_directory() as directory:
        trainer.train(
            resume_from_checkpoint=os.path.join(directory, RayTrainReportCallback.CHECKPOINT_NAME)
        )


def fit(tmp_path, max_steps, checkpoint=None):
    rank_dir = tmp_path / "hf"
    return TorchTrainer(
        train_func,
        train_loop_config={"output_dir": str(rank_dir), "max_steps": max_steps},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="hf", storage_path=str(tmp_path / "runs"), verbose=0),
        resume_from_checkpoint=checkpoint,
    ).fit()


def test_transformers_trainer_reports_checkpoints_and_resumes(tmp_path):
    result = fit(tmp_path, max_steps=8)
    rows = result.metrics_dataframe
    assert {"loss", "eval_loss", "step", "epoch"} <= set(rows.columns)
    logged = rows.dropna(subset=["loss"])["step"].tolist()
    assert logged == [2, 4, 6, 8]
    assert rows.dropna(subset=["eval_loss"])["step"].tolist() == [4, 8]
    assert sorted(rows.dropna(subset=["checkpoint_dir_name"])["step"]) == [4, 8]
    with result.checkpoint.as_directory() as directory:
        saved = os.listdir(os.path.join(directory, "checkpoint"))
        assert "trainer_state.json" in saved and "model.safetensors" in saved

    resumed = fit(tmp_path / "again", max_steps=12, checkpoint=result.checkpoint)
    steps = resumed.metrics_dataframe.dropna(subset=["loss"])["step"].tolist()
    assert steps == [10, 12]  # continued from step 8, not from 0


def shard_func(config):
    import transformers

    from lockstep.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    model = tiny_bert()
    shard = train.get_dataset_shard("train")
    seen = []

    def batches():
        for batch in shard.iter_torch_batches(batch_size=4):
            seen.append(int(batch["row"][0]))
            yield {"input_ids": batch["input_ids"], "labels": batch["labels"]}

    class Batches:
        def __iter__(self):
            return batches()

    args = transformers.TrainingArguments(
        output_dir=config["output_dir"],
        max_steps=4,
        logging_steps=2,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=Batches(), callbacks=[RayTrainReportCallback()]
    )
    prepare_trainer(trainer).train()
    train.report({"first_rows": seen[:4]})


def test_prepare_trainer_reads_each_workers_own_shard(tmp_path):
    import lockstep.data

    rows = [
        {"row": i, "input_ids": [(i + j) % 32 for j in range(8)], "labels": i % 2}
        for i in range(32)
    ]
    result = TorchTrainer(
        shard_func,
        train_loop_config={"output_dir": str(tmp_path / "hf")},
        datasets={"train": lockstep.data.from_items(rows)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="shards", storage_path=str(tmp_path / "runs"), verbose=0),
    ).fit()
    losses = result.metrics_dataframe.dropna(subset=["loss"])
    assert losses["step"].tolist() == [2, 4]
    assert result.metrics["first_rows"] == [0, 4, 8, 12]  # rank 0's half, read by rank 0
