"""The GBDT benchmarks' data: synthetic binary classification, in memory or in parquet."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd


def make_data(rows: int, features: int = 30, seed: int = 0) -> pd.DataFrame:
    """Features from a normal distribution; the label from a noisy non-linear rule."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    w = rng.standard_normal(features)
    logits = x @ w + 0.5 * x[:, 0] * x[:, 1] + rng.standard_normal(rows)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(features)])
    frame["label"] = (logits > 0).astype(np.float32)
    return frame


def write_parquet(frame: pd.DataFrame, directory: str, files: int = 8) -> str:
    """``frame`` as ``files`` parquet files in ``directory``."""
    for i, part in enumerate(np.array_split(np.arange(len(frame)), files)):
        frame.iloc[part].to_parquet(os.path.join(directory, f"part-{i:02d}.parquet"))
    return directory
