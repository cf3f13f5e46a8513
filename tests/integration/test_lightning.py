"""A lightning.Trainer under TorchTrainer on 2 CPU workers: reports, checkpoints, resumes,
and every rank ends with the same weights."""

from __future__ import annotations

import contextlib
import math
import os

import pytest
import torch

from lockstep import train
from lockstep.train import RunConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer

pytestmark = pytest.mark.slow


def train_func(config):
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    from lockstep.train import lightning as ray_lightning

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        def configure_optimizers(self):
            # Momentum gives the optimizer a state to checkpoint and restore.
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    torch.manual_seed(0)
    x = torch.randn(64, 4)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    strategy_class = {
        "ddp": ray_lightning.RayDDPStrategy,
        "fsdp": ray_lightning.RayFSDPStrategy,
        "deepspeed": ray_lightning.RayDeepSpeedStrategy,
    }[config.get("strategy", "ddp")]
    strategy = strategy_class(**config.get("strategy_kwargs", {}))
    trainer = pl.Trainer(
        max_epochs=config["epochs"],
        devices="auto",
        accelerator="cpu",
        strategy=strategy,
        plugins=[ray_lightning.RayLightningEnvironment()],
        callbacks=[ray_lightning.RayTrainReportCallback()],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
    )
    trainer = ray_lightning.prepare_trainer(trainer)
    model = Regression()
    loader = DataLoader(data, batch_size=8, shuffle=True)
    checkpoint = train.get_checkpoint()
    if checkpoint is None:
        trainer.fit(model, loader)
    else:
        with checkpoint.as_directory() as directory:
            path = os.path.join(directory, ray_lightning.RayTrainReportCallback.CHECKPOINT_NAME)
            trainer.fit(model, loader, ckpt_path=path)
    assert len(loader.dataset) // len(trainer.train_dataloader) == 16  # 32 rows a rank
    if config.get("validate"):
        # Validation on its own: the strategy sets the model up again, for inference.
        (scores,) = trainer.validate(model, loader, verbose=False)
        train.report({"val_loss": scores["val_loss"]})
    rank = train.get_context().get_world_rank()
    with gathered(trainer.strategy):
        state = {k: v.clone() for k, v in model.layer.state_dict().items()}
    torch.save(state, os.path.join(config["out"], f"rank{rank}.pt"))
    with open(os.path.join(config["out"], f"rank{rank}.units"), "w") as units:
        units.write(str(fsdp_units(trainer.strategy.model)))
    assert trainer.world_size == 2 and trainer.global_rank == rank


def gathered(strategy):
    """Every rank sees the whole weights inside (FSDP holds a shard of them otherwise)."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    if isinstance(strategy.model, FullyShardedDataParallel):
        return FullyShardedDataParallel.summon_full_params(strategy.model)
    return contextlib.nullcontext()


def fsdp_units(model):
    from torch.distributed.fsdp import FullyShardedDataParallel

    return sum(isinstance(m, FullyShardedDataParallel) for m in model.modules())


def fit(tmp_path, epochs, checkpoint=None, **config):
    out = tmp_path / "weights"
    out.mkdir(parents=True, exist_ok=True)
    return TorchTrainer(
        train_func,
        train_loop_config={"epochs": epochs, "out": str(out), **config},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="pl", storage_path=str(tmp_path / "runs"), verbose=0),
        resume_from_checkpoint=checkpoint,
    ).fit()


def weights(tmp_path):
    return [torch.load(tmp_path / "weights" / f"rank{r}.pt") for r in (0, 1)]


def test_lightning_ddp_reports_checkpoints_resumes_with_identical_weights(tmp_path):
    result = fit(tmp_path, epochs=2)
    rows = result.metrics_dataframe
    assert rows["epoch"].tolist() == [0, 1]
    assert rows["step"].tolist() == [4, 8]  # 32 rows a rank, batches of 8
    assert rows["train_loss"].notna().all()
    assert rows["checkpoint_dir_name"].notna().all()
    with result.checkpoint.as_directory() as directory:
        saved = torch.load(os.path.join(directory, "checkpoint.ckpt"), weights_only=False)
    assert saved["epoch"] == 1 and saved["global_step"] == 8
    first, second = weights(tmp_path)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)

    resumed = fit(tmp_path / "again", epochs=3, checkpoint=result.checkpoint)
    assert resumed.metrics_dataframe["epoch"].tolist() == [2]
    assert resumed.metrics_dataframe["step"].tolist() == [12]
    first, second = weights(tmp_path / "again")
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_lightning_fsdp_on_cpu_checkpoints_whole_weights_and_resumes_where_it_stopped(tmp_path):
    # With a wrap policy (each Linear its own FSDP unit) here and on resuming, without one
    # in the straight run: the whole-weight checkpoints have the same names either way.
    wrapped = {"strategy": "fsdp", "strategy_kwargs": {"auto_wrap_policy": {torch.nn.Linear}}}
    result = fit(tmp_path, epochs=2, **wrapped)
    assert result.metrics_dataframe["step"].tolist() == [4, 8]
    first, second = weights(tmp_path)
    assert all(torch.equal(first[k], second[k]) for k in first)
    with result.checkpoint.as_directory() as directory:
        saved = torch.load(os.path.join(directory, "checkpoint.ckpt"), weights_only=False)
    # One file with the whole (gathered) weights and optimizer state, not a shard a rank.
    assert torch.equal(saved["state_dict"]["layer.weight"], first["weight"])
    assert torch.equal(saved["state_dict"]["layer.bias"], first["bias"])
    momentum = saved["optimizer_states"][0]["state"]
    assert sorted(momentum) == [0, 1] and momentum[0]["momentum_buffer"].shape == (1, 4)

    resumed = fit(tmp_path / "again", epochs=3, checkpoint=result.checkpoint, **wrapped)
    # The straight run saves sharded checkpoints: every rank's shard lands in the checkpoint.
    sharded = {"strategy": "fsdp", "strategy_kwargs": {"state_dict_type": "sharded"}}
    straight = fit(tmp_path / "straight", epochs=3, **sharded)
    with straight.checkpoint.as_directory() as directory:
        files = sorted(os.listdir(os.path.join(directory, "checkpoint.ckpt")))
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    # The policy made the Linear an FSDP unit of its own inside the model's.
    assert (tmp_path / "weights" / "rank1.units").read_text() == "2"
    assert (tmp_path / "again" / "weights" / "rank1.units").read_text() == "2"
    assert (tmp_path / "straight" / "weights" / "rank1.units").read_text() == "1"
    assert resumed.metrics_dataframe["step"].tolist() == [12]
    # Weights and momentum were restored: 2 + 1 epochs end where 3 epochs in one go end.
    after_resume, in_one_go = weights(tmp_path / "again"), weights(tmp_path / "straight")
    for mine, expected in zip(after_resume, in_one_go, strict=True):
        assert all(torch.allclose(mine[k], expected[k]) for k in expected)
    assert not torch.equal(after_resume[0]["weight"], first["weight"])


SHARDS = {
    # ZeRO 2: the model once, the optimizer state in one shard a rank.
    2: [
        "mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ],
    # ZeRO 3: the weights are sharded too.
    3: [
        "zero_pp_rank_0_mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_model_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ],
}


# Three fits; on a fresh machine the first also compiles DeepSpeed's shared-memory
# communication op (a minute alone, 5 on a loaded 2-core machine; then cached), past the
# suite's 120 s default.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("stage", [2, 3])
def test_lightning_deepspeed_on_cpu_checkpoints_every_shard_and_resumes(
    tmp_path, monkeypatch, stage
):
    import tqdm
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    # DeepSpeed's reader shows tqdm bars; tqdm's documented switch keeps its monitor
    # thread from outliving the test.
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)

    deepspeed = {"strategy": "deepspeed", "strategy_kwargs": {"stage": stage}}
    result = fit(tmp_path, epochs=2, **deepspeed)
    assert result.metrics_dataframe["step"].tolist() == [4, 8]
    first, second = weights(tmp_path)
    assert all(torch.equal(first[k], second[k]) for k in first)
    with result.checkpoint.as_directory() as directory:
        saved = os.path.join(directory, "checkpoint.ckpt")
        assert sorted(os.listdir(os.path.join(saved, "checkpoint"))) == SHARDS[stage]
        # DeepSpeed's own reader puts the shards together: the weights both ranks hold.
        whole = get_fp32_state_dict_from_zero_checkpoint(saved, tag="checkpoint")
    assert torch.equal(whole["layer.weight"], first["weight"])
    assert torch.equal(whole["layer.bias"], first["bias"])

    resumed = fit(
        tmp_path / "again", epochs=3, checkpoint=result.checkpoint, validate=True, **deepspeed
    )
    rows = resumed.metrics_dataframe
    assert rows["step"].tolist()[:1] == [12]
    assert math.isfinite(rows["val_loss"].iloc[-1]) and rows["val_loss"].iloc[-1] > 0
    # ZeRO takes the same SGD steps as DDP: resuming after 2 epochs ends where DDP's
    # 3 epochs in one go end, so the weights and the momentum shards were restored.
    fit(tmp_path / "ddp", epochs=3)
    after_resume, in_one_go = weights(tmp_path / "again"), weights(tmp_path / "ddp")
    for mine, expected in zip(after_resume, in_one_go, strict=True):
        assert all(torch.allclose(mine[k], expected[k]) for k in expected)


def strategies_func():
    from lockstep.train.lightning import (
        RayDDPStrategy,
        RayDeepSpeedStrategy,
        RayFSDPStrategy,
        RayLightningEnvironment,
    )

    rank = train.get_context().get_world_rank()
    environment = RayLightningEnvironment()
    for strategy in (RayDDPStrategy(), RayFSDPStrategy(), RayDeepSpeedStrategy()):
        assert strategy.root_device == torch.device("cpu")
        assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": rank}
    environment.set_world_size(8)  # Lightning's guess; lockstep's world wins
    train.report({"world": environment.world_size(), "rank": environment.global_rank()})


def test_strategies_and_environment_take_lockstep_ranks(tmp_path):
    result = TorchTrainer(
        strategies_func,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="env", storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert result.metrics == {"world": 2, "rank": 0}


# Lightning says so when the machine has SLURM's srun (as the SLURM tests' machines do)
@pytest.mark.filterwarnings("ignore:The `srun` command is available")
def test_prepare_trainer_names_the_missing_strategy():
    import lightning.pytorch as pl

    from lockstep.train.lightning import prepare_trainer

    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False)
    with pytest.raises(ValueError, match="HINT: pass strategy=RayDDPStrategy"):
        prepare_trainer(trainer)
