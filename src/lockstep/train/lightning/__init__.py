"""Run a ``lightning.Trainer`` under ``TorchTrainer``, as in Ray's guide.

Inside the training function: ``strategy=RayDDPStrategy()`` (or FSDP, DeepSpeed),
``plugins=[RayLightningEnvironment()]``, ``callbacks=[RayTrainReportCallback()]``,
``devices="auto"``, then ``trainer = prepare_trainer(trainer)`` and ``trainer.fit(...)``.
Works with ``lightning`` and with ``pytorch_lightning``.

Example:
    >>> from lockstep.train.lightning import RayTrainReportCallback
    >>> RayTrainReportCallback.CHECKPOINT_NAME
    'checkpoint.ckpt'
"""

from lockstep.train.lightning._lightning import (
    RayDDPStrategy,
    RayDeepSpeedStrategy,
    RayFSDPStrategy,
    RayLightningEnvironment,
    RayTrainReportCallback,
    prepare_trainer,
)

__all__ = [
    "RayDDPStrategy",
    "RayDeepSpeedStrategy",
    "RayFSDPStrategy",
    "RayLightningEnvironment",
    "RayTrainReportCallback",
    "prepare_trainer",
]
