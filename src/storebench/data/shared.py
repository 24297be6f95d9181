"""Arrays that cross into client processes as memory-mapped files, not copies.

Threads see the array itself; when pickled for a process client only the
file's path travels, and the client maps the file read-only."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


class Shared:
    def __init__(self, array: np.ndarray, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        np.save(self.path, np.ascontiguousarray(array), allow_pickle=False)
        self._array: np.ndarray | None = array

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        return self._array

    def __len__(self) -> int:
        return len(self.array)

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._array = None
