"""Engines under the conformance suite. Each entry makes a StoreSpec for a
fresh, private instance; later engines (servers) add their entries here."""

from collections.abc import Callable
from pathlib import Path

import pytest

from storebench.stores.base import StoreSpec

ENGINES: dict[str, Callable[[Path], StoreSpec]] = {
    "memory": lambda tmp: StoreSpec("memory"),
    "sqlite": lambda tmp: StoreSpec("sqlite", str(tmp / "conformance.db")),
}


@pytest.fixture(params=sorted(ENGINES))
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    return ENGINES[request.param](tmp_path)


@pytest.fixture
def store(spec: StoreSpec):
    s = spec.open()
    yield s
    s.close()
