"""Behaviour specific to the embedded stores (memory, sqlite)."""

import pytest

from storebench.errors import UserError
from storebench.stores.base import StoreSpec
from tests.conftest import make_docs


def test_memory_compaction_shrinks_a_collection_after_deletes():
    store = StoreSpec("memory").open()
    try:
        docs = make_docs(3000, dim=32)
        coll = store.create_collection("sb_shrink", docs.schema())
        coll.insert(docs)
        coll.delete(docs.ids[:2000])
        before = coll.size_bytes()
        coll.compact()
        after = coll.size_bytes()
        assert after < before * 0.6, (before, after)
        assert coll.count() == 1000
    finally:
        store.close()


def test_sqlite_options_are_checked():
    with pytest.raises(UserError, match="unknown option parameter 'journal'"):
        StoreSpec("sqlite", options={"journal": "x"}).open()
    with pytest.raises(
        UserError, match="option mode of sqlite: Input should be 'file' or 'memory'"
    ):
        StoreSpec("sqlite", options={"mode": "ram"}).open()


def test_sqlite_counts_only_its_own_pages_and_vacuum_shrinks_the_file(tmp_path):
    path = tmp_path / "db.sqlite"
    store = StoreSpec("sqlite", str(path)).open()
    try:
        docs = make_docs(3000, dim=32)
        coll = store.create_collection("sb_shrink", docs.schema())
        coll.insert(docs)
        full = coll.size_bytes()
        coll.delete(docs.ids[:2000])
        store.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        file_before = path.stat().st_size
        assert coll.size_bytes() < full * 0.6  # freed pages are not the table's
        coll.compact()
        store.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert path.stat().st_size < file_before * 0.6
        assert coll.count() == 1000
    finally:
        store.close()
