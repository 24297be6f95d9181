"""Reports from result records: terminal tables (``terminal``), and with the
``report`` extra, Markdown, plots and a self-contained HTML page (``build``),
comparisons (``compare``) and exports (``export``).

Importing this package stays light (no matplotlib or pandas) so the CLI's
terminal tables load fast; the heavy libraries are imported when used.

For notebooks::

    from storebench.report import frames
    df = frames("results/")          # one row per run x task
    df.groupby(["store.engine", "task"])["latency_ns.p99"].median()
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any


def frames(paths: str | Path | Iterable[str | Path]) -> Any:
    """A pandas DataFrame with one row per run x task of the result files
    (or directories of ``*.jsonl``) at ``paths``."""
    from storebench.report.export import frames as _frames

    return _frames(paths)


__all__ = ["frames"]
