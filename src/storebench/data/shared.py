"""Arrays that cross into client processes as memory-mapped files, not copies.

Threads see the array itself; when pickled for a process client only the
file's path travels, and the client maps the file read-only.

An array that already *is* a whole ``.npy`` file mapped read-only (a dataset
from the data directory) is not copied at all: its own file is shared.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def npy_file_of(array: np.ndarray) -> str | None:
    """The path of the ``.npy`` file ``array`` maps in full, else None."""
    if not isinstance(array, np.memmap):
        return None
    filename = getattr(array, "filename", None)
    if not filename or not str(filename).endswith(".npy") or not array.flags.c_contiguous:
        return None
    try:
        with open(filename, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            read = (
                np.lib.format.read_array_header_1_0
                if major == 1
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read(f)
    except (OSError, ValueError):
        return None
    # a C-contiguous view of the same shape and dtype over that mapping is
    # the whole array (a slice or a re-view would differ in one of them)
    if fortran or tuple(shape) != array.shape or np.dtype(dtype) != array.dtype:
        return None
    return str(filename)


class Shared:
    def __init__(self, array: np.ndarray, path: str | os.PathLike[str]):
        existing = npy_file_of(array)
        if existing is not None:
            self.path = existing
        else:
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
