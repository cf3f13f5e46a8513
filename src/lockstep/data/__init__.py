"""Datasets that stream into workers, with Ray Data's API (``ray.data``) on pyarrow.

A dataset is described on the driver (files, row ranges, pending transforms) and read,
transformed and batched inside each worker, block by block, so data larger than memory
trains fine. Pass datasets to a trainer as ``datasets={"train": ds}``; each worker reads its
own part with ``lockstep.train.get_dataset_shard("train")``.

Example:
    >>> import lockstep.data as ld
    >>> ds = ld.from_items([{"x": float(i), "y": 2.0 * i} for i in (0, 1, 2, 3, 4)])
    >>> [part.count() for part in ds.split(2, equal=True)]
    [2, 2]
"""

from lockstep.data import aggregate, context, datasource, expressions, preprocessors
from lockstep.data._compute import ActorPoolStrategy, TaskPoolStrategy
from lockstep.data._context import DataContext, ExecutionOptions, ExecutionResources
from lockstep.data._dataset import Dataset
from lockstep.data._file_order import FileShuffleConfig
from lockstep.data._groupby import GroupedData
from lockstep.data._iterator import DataIterator
from lockstep.data._pipeline import DatasetPipeline
from lockstep.data._read import (
    from_arrow,
    from_blocks,
    from_huggingface,
    from_items,
    from_numpy,
    from_pandas,
    from_tf,
    from_torch,
    range,
    range_tensor,
    read_csv,
    read_json,
    read_numpy,
    read_parquet,
    read_text,
)
from lockstep.data._read_media import read_binary_files, read_images, read_tfrecords
from lockstep.data._relational import Schema
from lockstep.data._write import SaveMode
from lockstep.data.preprocessors import Preprocessor

__all__ = [
    "ActorPoolStrategy",
    "DataContext",
    "DataIterator",
    "Dataset",
    "DatasetPipeline",
    "ExecutionOptions",
    "ExecutionResources",
    "FileShuffleConfig",
    "GroupedData",
    "Preprocessor",
    "SaveMode",
    "Schema",
    "TaskPoolStrategy",
    "aggregate",
    "context",
    "datasource",
    "expressions",
    "from_arrow",
    "from_blocks",
    "from_huggingface",
    "from_items",
    "from_numpy",
    "from_pandas",
    "from_tf",
    "from_torch",
    "preprocessors",
    "range",
    "range_tensor",
    "read_binary_files",
    "read_csv",
    "read_images",
    "read_json",
    "read_numpy",
    "read_parquet",
    "read_text",
    "read_tfrecords",
]
