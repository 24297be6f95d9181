"""Mongita beyond the conformance suite: its query language has no $or,
$and, $nor or $not, so filters become unions of plain queries."""

import numpy as np
import pytest
from mongita import MongitaClientMemory

from storebench.data import filters as F
from storebench.errors import UserError
from storebench.stores.base import Capability, StoreSpec
from storebench.stores.document.mongita import to_mongita
from tests.conftest import make_docs


def test_mongita_itself_answers_or_with_nothing():
    # the reason for the compiler below: if this starts failing, Mongita
    # has learnt $or and the compiler could use it
    c = MongitaClientMemory()["sb"]["t"]
    c.insert_many([{"_id": "1", "a": 1}, {"_id": "2", "a": 2}])
    assert list(c.find({"$or": [{"a": 1}, {"a": 2}]})) == []
    assert len(list(c.find({"a": {"$in": [1, 2]}}))) == 2


def test_filters_become_alternatives_of_plain_queries():
    key = "tags\uff0ei"  # a dot is a path to Mongita
    assert to_mongita(None) == [{}]
    assert to_mongita(F.Range("tags.i", 1, 5)) == [{key: {"$gte": 1, "$lte": 5}}]
    assert to_mongita(F.Not(F.Range("tags.i", 1, 5))) == [{key: {"$lt": 1}}, {key: {"$gt": 5}}]
    # De Morgan: not (a and b) = not a or not b
    assert to_mongita(F.Not(F.And((F.Cmp("a", "lt", 3), F.In("b", ("x",)))))) == [
        {"a": {"$gte": 3}},
        {"b": {"$nin": ["x"]}},
    ]
    # several conditions on one field merge; contradictions vanish
    assert to_mongita(
        F.And((F.Cmp("a", "ne", 1), F.Cmp("a", "ne", 2), F.Cmp("a", "gt", 0), F.Cmp("a", "gt", 4)))
    ) == [{"a": {"$nin": [1, 2], "$gt": 4}}]
    assert to_mongita(F.And((F.Cmp("a", "eq", 1), F.Cmp("a", "eq", 2)))) == []
    assert to_mongita(F.And((F.In("a", (1, 2)), F.In("a", (3,))))) == []
    with pytest.raises(UserError, match="alternatives"):
        to_mongita(
            F.And(tuple(F.Or((F.Cmp("a", "eq", i), F.Cmp("b", "eq", i))) for i in range(10)))
        )


def test_a_union_with_order_and_limit_matches_numpy(tmp_path):
    store = StoreSpec("mongita", str(tmp_path / "m")).open()
    try:
        docs = make_docs(300)
        coll = store.create_collection("sb_union", docs.schema(indexed=("tags.i",)))
        coll.insert(docs)
        where = F.Or((F.Cmp("tags.i", "lt", 5), F.Cmp("label", "eq", "l3")))
        got = coll.find(where, order=("score", True), limit=9)
        mask = F.evaluate(where, docs.fields)
        want = np.sort(docs.fields["score"][mask])[::-1][:9]
        np.testing.assert_allclose(got.fields["score"], want)
        assert len(set(coll.find(where).ids.tolist())) == int(mask.sum())
    finally:
        store.close()


def test_memory_mode_keeps_nothing_on_disk_and_declares_no_size():
    store = StoreSpec("mongita", options={"mode": "memory"}).open()
    try:
        assert not store.supports(Capability.SIZE)
        assert store.spec.url is None
        coll = store.create_collection("sb_mem", make_docs(5).schema())
        coll.insert(make_docs(5))
        assert coll.count() == 5
    finally:
        store.close()


def test_a_collection_exists_before_its_first_document(tmp_path):
    # Mongita makes a collection on its first write; clients open it earlier
    store = StoreSpec("mongita", str(tmp_path / "m")).open()
    try:
        schema = make_docs(1).select([], vectors=False).schema()
        store.create_collection("sb_empty", schema)
        assert store.open_collection("sb_empty", schema).count() == 0
    finally:
        store.close()


def test_reads_during_writes_neither_fail_nor_come_back_empty(tmp_path):
    # unguarded, Mongita's reads during inserts raise "dictionary changed
    # size during iteration" or see an empty collection
    import threading

    from storebench.workloads.social import _one, post_schema

    store = StoreSpec("mongita", str(tmp_path / "m")).open()
    try:
        posts = store.create_collection("sb_race", post_schema("users"))
        posts.insert(_one(0, author=1, title="t", body="b"))
        stop = threading.Event()
        problems: list[object] = []

        def writer(w: int) -> None:
            for i in range(1, 30):
                posts.insert(_one(i * 10 + w, author=1, title="t", body="b"))

        def reader() -> None:
            while not stop.is_set():
                try:
                    if not len(posts.find(None, ("seq", True), 1)):
                        problems.append("empty")
                except Exception as exc:  # noqa: BLE001 (reported below)
                    problems.append(exc)

        writers = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
        readers = [threading.Thread(target=reader) for _ in range(3)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join()
        stop.set()
        for t in readers:
            t.join()
        assert not problems, problems[:3]
        assert posts.count() == 1 + 6 * 29
    finally:
        store.close()
