"""Reports of a study: pandas frames, a terminal table, PNG plots and a self-contained HTML page.

Importing this package imports pandas; matplotlib and plotly load only when a figure is drawn.
"""

from autotune.report.export import read_csv, require_parquet, write_csv, write_parquet
from autotune.report.frames import (
    frame_from_records,
    measurements_frame,
    summary_frame,
)
from autotune.report.html import write_html
from autotune.report.plots import plot_png
from autotune.report.table import provenance, summary_table

__all__ = [
    "frame_from_records",
    "measurements_frame",
    "plot_png",
    "provenance",
    "read_csv",
    "require_parquet",
    "summary_frame",
    "summary_table",
    "write_csv",
    "write_html",
    "write_parquet",
]
