"""Exporting the measurements frame: CSV always, Parquet when a Parquet engine is installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

from autotune.errors import SpecError


def require_parquet(source: str = "--parquet") -> None:
    """Fail before anything is written when pandas has no Parquet engine to write with."""
    if not any(importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet")):
        raise SpecError(
            "writing Parquet needs the pyarrow package (pip install pyarrow)", source=source
        )


def write_csv(df: pd.DataFrame, path: Path | str) -> Path:
    """One row per measurement; config, engine args and env are JSON text columns."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    return out


def write_parquet(df: pd.DataFrame, path: Path | str) -> Path:
    require_parquet()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out, index=False)
    return out


def read_csv(path: Path | str) -> pd.DataFrame:
    """Read an exported measurements CSV back (JSON text columns stay text)."""
    return pd.read_csv(
        path,
        dtype={"speculative_config": str, "engine_args": str, "env": str, "draft": str},
        keep_default_na=False,
        na_values=[""],
    )
