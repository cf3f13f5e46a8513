"""Preprocessors with Ray's API (``ray.data.preprocessors``): fit on a dataset, transform any.

Statistics are computed streaming over the dataset's blocks with ``pyarrow.compute``;
transforms are lazy ops that each worker applies to the rows it reads; ``transform_batch``
applies the same transform to one batch at serving time. Fitted preprocessors pickle.

Example:
    >>> import lockstep.data as ld
    >>> from lockstep.data.preprocessors import Chain, Concatenator, StandardScaler
    >>> ds = ld.from_items([{"a": 1.0, "b": 10.0}, {"a": 3.0, "b": 30.0}])
    >>> prep = Chain(StandardScaler(["a", "b"]), Concatenator(["a", "b"], output_column_name="x"))
    >>> prep.fit_transform(ds).take_batch()["x"].tolist()
    [[-1.0, -1.0], [1.0, 1.0]]
"""

from lockstep.data.preprocessors._base import (
    FitStatus,
    Preprocessor,
    PreprocessorNotFittedException,
    SerializablePreprocessorBase,
    UnknownPreprocessorError,
)
from lockstep.data.preprocessors._chain import Chain, Pipeline
from lockstep.data.preprocessors._concatenator import Concatenator
from lockstep.data.preprocessors._discretizers import (
    CustomKBinsDiscretizer,
    UniformKBinsDiscretizer,
)
from lockstep.data.preprocessors._encoders import (
    Categorizer,
    LabelEncoder,
    MultiHotEncoder,
    OneHotEncoder,
    OrdinalEncoder,
)
from lockstep.data.preprocessors._imputer import SimpleImputer
from lockstep.data.preprocessors._mappers import BatchMapper, FunctionTransformer, Repartitioner
from lockstep.data.preprocessors._normalizer import Normalizer
from lockstep.data.preprocessors._scalers import (
    MaxAbsScaler,
    MinMaxScaler,
    RobustScaler,
    Scaler,
    StandardScaler,
)
from lockstep.data.preprocessors._text import (
    CountVectorizer,
    FeatureHasher,
    HashingVectorizer,
    Tokenizer,
)
from lockstep.data.preprocessors._transformer import PowerTransformer

__all__ = [
    "BatchMapper",
    "Categorizer",
    "Chain",
    "Concatenator",
    "CountVectorizer",
    "CustomKBinsDiscretizer",
    "FeatureHasher",
    "FitStatus",
    "FunctionTransformer",
    "HashingVectorizer",
    "LabelEncoder",
    "MaxAbsScaler",
    "MinMaxScaler",
    "MultiHotEncoder",
    "Normalizer",
    "OneHotEncoder",
    "OrdinalEncoder",
    "Pipeline",
    "PowerTransformer",
    "Preprocessor",
    "PreprocessorNotFittedException",
    "Repartitioner",
    "RobustScaler",
    "Scaler",
    "SerializablePreprocessorBase",
    "SimpleImputer",
    "StandardScaler",
    "Tokenizer",
    "UniformKBinsDiscretizer",
    "UnknownPreprocessorError",
]
