"""TensorFlow on lockstep: TensorflowTrainer and the helpers a training function calls.

The same names as ``ray.train.tensorflow``. Importing this package makes ``tf.keras`` the
Keras 2 package ``tf_keras`` (``TF_USE_LEGACY_KERAS=1``) in the driver and the workers when
``tf_keras`` is installed and the variable is unset: Keras 3's ``model.fit`` fails under
``MultiWorkerMirroredStrategy`` with more than one worker. Set ``TF_USE_LEGACY_KERAS=0`` to
keep Keras 3.
"""

from lockstep._internal.backends.tensorflow import TensorflowConfig, prefer_legacy_keras

# Before anything resolves tf.keras: TensorFlow picks its Keras at the first use of it.
prefer_legacy_keras()

# Imported here so that workers forked from this driver start with TensorFlow imported.
import tensorflow  # noqa: E402, F401

from lockstep.train.tensorflow._checkpoint import TensorflowCheckpoint  # noqa: E402
from lockstep.train.tensorflow._data import prepare_dataset_shard  # noqa: E402
from lockstep.train.tensorflow._trainer import TensorflowTrainer  # noqa: E402

__all__ = ["TensorflowCheckpoint", "TensorflowConfig", "TensorflowTrainer", "prepare_dataset_shard"]
