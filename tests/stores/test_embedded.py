"""Behaviour specific to the embedded stores (memory, sqlite)."""

import tracemalloc

import numpy as np
import pytest

from storebench.data.filters import Cmp
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


def test_memory_search_after_deletes_is_exact_and_copies_no_vectors():
    """After deletes (tombstones) a search scans the vectors in place: it
    used to gather a copy of every live vector per query (512 MB at 1M x
    128, the DocArray study's one-million run)."""
    store = StoreSpec("memory").open()
    try:
        docs = make_docs(20_000, dim=64)
        coll = store.create_collection("sb_tomb", docs.schema())
        coll.insert(docs)
        q = docs.vectors[:5] + 0.01
        gone = coll.search(q, 3).ids[:, :2].ravel()  # each query's nearest go first
        coll.delete(gone)
        live = ~np.isin(docs.ids, gone)
        d = ((docs.vectors[live][None, :, :] - q[:, None, :]) ** 2).sum(-1)
        want = docs.ids[live][np.argsort(d, axis=1, kind="stable")[:, :10]]
        tracemalloc.start()
        got = coll.search(q, 10)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert got.ids.tolist() == want.tolist()
        assert not np.isin(got.ids, gone).any()
        assert peak < docs.vectors.nbytes // 4, peak

        # a filter that keeps most rows, and one that keeps fewer than k
        most = coll.search(q, 10, Cmp("tags.i", "ge", 2))
        assert (docs.fields["tags.i"][most.ids.ravel()] >= 2).all()
        few_ids = docs.ids[live][docs.fields["tags.i"][live] == 7][:3]
        coll.delete(np.setdiff1d(docs.ids[live], few_ids))
        res = coll.search(q, 10)
        assert sorted(res.ids[0, :3].tolist()) == sorted(few_ids.tolist())
        assert (res.ids[:, 3:] == -1).all() and np.isinf(res.distances[:, 3:]).all()
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
