"""TensorflowCheckpoint: a checkpoint holding a Keras model."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import tensorflow as tf

from lockstep.train._framework_checkpoint import FrameworkCheckpoint

MODEL_FILENAME_KEY = "_model_filename"


class TensorflowCheckpoint(FrameworkCheckpoint):
    """A :class:`~lockstep.train.Checkpoint` holding a Keras model, as Ray's does.

    Build one with :meth:`from_model`, :meth:`from_saved_model` or :meth:`from_h5`; read
    the model back with :meth:`get_model`. ``TensorflowCheckpoint(result.checkpoint.path)``
    opens a checkpoint that ``ReportCheckpointCallback`` reported.

    Example:
        >>> import shutil
        >>> model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
        >>> checkpoint = TensorflowCheckpoint.from_model(model)
        >>> checkpoint.get_model().count_params()
        3
        >>> shutil.rmtree(checkpoint.path)
    """

    MODEL_FILENAME = "model.keras"

    @classmethod
    def from_model(cls, model: Any, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """A checkpoint of ``model``, saved as ``model.keras`` in a new temporary directory.

        Under Keras 2 every worker of a ``MultiWorkerMirroredStrategy`` must call this (the
        save runs collective operations); each saves into its own directory.
        """
        tmp = tempfile.mkdtemp()
        model.save(os.path.join(tmp, cls.MODEL_FILENAME))
        return cls._with_model_file(tmp, cls.MODEL_FILENAME, preprocessor)

    @classmethod
    def from_h5(cls, file_path: str, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """A checkpoint holding a copy of the Keras H5 model file ``file_path``."""
        if not os.path.isfile(file_path) or not file_path.endswith(".h5"):
            raise ValueError(
                f"from_h5 takes an existing .h5 file, got {file_path!r}. HINT: "
                "model.save('model.h5') first, or use from_model(model)"
            )
        tmp = tempfile.mkdtemp()
        name = os.path.basename(file_path)
        shutil.copy(file_path, os.path.join(tmp, name))
        return cls._with_model_file(tmp, name, preprocessor)

    @classmethod
    def from_saved_model(cls, dir_path: str, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """A checkpoint holding a copy of the SavedModel directory ``dir_path``."""
        if not os.path.isdir(dir_path):
            raise ValueError(
                f"from_saved_model takes a SavedModel directory, got {dir_path!r}. HINT: "
                "tf.saved_model.save(model, path) or model.export(path) first"
            )
        tmp = tempfile.mkdtemp()
        shutil.copytree(dir_path, tmp, dirs_exist_ok=True)
        return cls._with_model_file(tmp, ".", preprocessor)

    def get_model(self, model: Any = None, model_definition: Any = None) -> Any:
        """The Keras model in this checkpoint, loaded with ``tf.keras.models.load_model``.

        ``model`` and ``model_definition`` are Ray's older arguments and are refused.
        """
        if model is not None or model_definition is not None:
            raise ValueError(
                "get_model() takes no model: the checkpoint holds the whole model. "
                "HINT: call checkpoint.get_model()"
            )
        name = self.get_metadata().get(MODEL_FILENAME_KEY, self.MODEL_FILENAME)
        with self.as_directory() as directory:
            return tf.keras.models.load_model(os.path.normpath(os.path.join(directory, name)))

    @classmethod
    def _with_model_file(cls, path: str, name: str, preprocessor: Any) -> TensorflowCheckpoint:
        checkpoint = cls.from_directory(path)
        assert isinstance(checkpoint, TensorflowCheckpoint)
        checkpoint.update_metadata({MODEL_FILENAME_KEY: name})
        if preprocessor is not None:
            checkpoint.set_preprocessor(preprocessor)
        return checkpoint
