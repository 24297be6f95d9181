"""The native client's compiled module (``storebench_fastclient``, built from
``native/fastclient`` by tools/setup.py): found here, below both the stores
that prepare its requests (``Collection.native_insert``, ``native_search``)
and the driver that runs its timed loops (``driver/native.py``)."""

from __future__ import annotations

import importlib
from typing import Any

MODULE = "storebench_fastclient"


def extension() -> Any | None:
    """The native client's module, or None where it is not installed."""
    try:
        return importlib.import_module(MODULE)
    except ImportError:
        return None
