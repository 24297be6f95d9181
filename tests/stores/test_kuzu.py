"""Kuzu beyond the conformance suite: one writer at a time, the database
path, dropping referenced collections, the Cypher compiler."""

import os
import threading

import numpy as np
import pytest

from storebench.data import filters as F
from storebench.errors import ForeignDataError, UserError
from storebench.stores.base import StoreSpec
from storebench.stores.graph.cypher import to_cypher
from tests.conftest import make_docs


def test_filters_compile_to_cypher_with_parameters():
    params: dict = {}
    q = to_cypher(
        F.And(
            (
                F.Range("tags.i", 1, 5),
                F.Or((F.Cmp("score", "lt", 0.5), F.Not(F.In("label", ("a", "b"))))),
                F.In("score", (1, 0.5)),
                F.In("label", ()),
            )
        ),
        lambda f: f"n.`{f}`",
        params,
        one_type_lists=True,  # Kuzu's (KuzuCollection._one_type_lists)
    )
    assert q == (
        "((n.`tags.i` >= $p0 AND n.`tags.i` <= $p1) AND (n.`score` < $p2 OR "
        "NOT (n.`label` IN $p3)) AND n.`score` IN $p4 AND false)"
    )
    # a list holds one type in Kuzu: mixed numbers become floats
    assert params == {"p0": 1, "p1": 5, "p2": 0.5, "p3": ["a", "b"], "p4": [1.0, 0.5]}


def test_concurrent_writers_are_serialised_not_failed(tmp_path):
    # Kuzu refuses a second write transaction at once; the store queues them
    store = StoreSpec("kuzu", str(tmp_path / "db")).open()
    try:
        docs = make_docs(160)
        coll = store.create_collection("sb_writers", docs.schema())
        errors: list[BaseException] = []

        def writer(w: int) -> None:
            try:
                for i in range(w, 160, 8):
                    coll.insert(docs.slice(i, i + 1))
            except BaseException as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        assert coll.count() == 160
    finally:
        store.close()


def test_a_given_path_keeps_its_data_and_a_private_one_goes(tmp_path):
    path = tmp_path / "keep.kuzu"
    docs = make_docs(20)
    store = StoreSpec("kuzu", str(path)).open()
    store.create_collection("sb_kept", docs.schema()).insert(docs)
    store.close()
    again = StoreSpec("kuzu", str(path)).open()
    try:
        assert again.open_collection("sb_kept", docs.schema()).count() == 20
    finally:
        again.close()
    private = StoreSpec("kuzu").open()
    where = private.spec.url
    assert where is not None and os.path.isdir(os.path.dirname(where))
    private.close()
    assert not os.path.exists(os.path.dirname(where))
    with pytest.raises(UserError, match="in-memory"):
        StoreSpec("kuzu", str(tmp_path / "m"), options={"mode": "memory"}).open()


def test_dropping_a_referenced_collection(tmp_path):
    from storebench.data.batch import DocBatch, Schema

    def rows(ids: list[int], field: str, values: list[int]) -> DocBatch:
        return DocBatch(np.array(ids, np.int64), {field: np.array(values, np.int64)})

    store = StoreSpec("kuzu", str(tmp_path / "db")).open()
    try:
        target = store.create_collection("sb_target", Schema({"x": "int"}))
        target.insert(rows([1, 2], "x", [7, 8]))
        mine = store.create_collection("sb_mine", Schema({"t": "int"}, refs={"t": "sb_target"}))
        mine.insert(rows([10, 11], "t", [1, 2]))
        # someone else's collection references it too: drop refuses, drops nothing
        store._create("someone_elses", Schema({"t": "int"}, refs={"t": "sb_target"}), store.Index())
        with pytest.raises(ForeignDataError, match="someone_elses"):
            target.drop()
        assert store.has_collection("sb_target") and "sb_mine__t" in store._tables()
        with store.writing(transaction=False) as run:  # the other owner goes away
            run("DROP TABLE someone_elses__t", {})
        # our own referencing collection loses its edges with the target
        target.drop()
        assert not store.has_collection("sb_target")
        assert "sb_mine__t" not in store._tables()
        got = mine.get(np.array([10, 11], np.int64)).sorted_by_id()
        assert got.fields["t"].tolist() == [-1, -1]
        assert mine.find(F.Cmp("t", "eq", -1)).ids.size == 2
        mine.drop()
        assert not store.has_collection("sb_mine")
    finally:
        store.close()


def test_compact_is_a_checkpoint_that_keeps_the_data(tmp_path):
    store = StoreSpec("kuzu", str(tmp_path / "db")).open()
    try:
        docs = make_docs(2000)
        coll = store.create_collection("sb_ckpt", docs.schema(indexed=("tags.i",)))
        coll.insert(docs)
        assert (tmp_path / "db.wal").exists()  # the rows are in the write-ahead log
        # ... and the size counts them (it checkpoints first: storage_info
        # sees checkpointed pages only, so it read ~1/60 of this before)
        size = coll.size_bytes()
        assert size >= docs.vectors.nbytes
        coll.compact()
        assert coll.size_bytes() == size
        assert not (tmp_path / "db.wal").exists() or (tmp_path / "db.wal").stat().st_size == 0
        got = coll.get(np.array([5, 1999], np.int64)).sorted_by_id()
        assert got.vectors.tobytes() == docs.vectors[[5, 1999]].tobytes()
    finally:
        store.close()


def test_repeated_statements_reuse_their_prepared_statement(tmp_path):
    # kuzu 0.11 leaks ~10 kB per execute(query, parameters): a social run
    # grew past 6 GB before the store kept prepared statements
    store = StoreSpec("kuzu", str(tmp_path / "db")).open()
    try:
        docs = make_docs(50)
        coll = store.create_collection("sb_prepared", docs.schema(indexed=("tags.i",)))
        coll.insert(docs)
        for i in range(200):
            coll.find(F.Cmp("tags.i", "eq", i % 50), ("score", True), 5)
            coll.get(docs.ids[i % 50 : i % 50 + 1])
        assert len(store._local.prepared) <= 5
        # a parameter of another type gets its own statement
        got = coll.find(F.In("score", (0.5, 1)), None, None)
        assert set(got.ids.tolist()) == set(
            docs.ids[F.evaluate(F.In("score", (0.5, 1)), docs.fields)].tolist()
        )
    finally:
        store.close()
