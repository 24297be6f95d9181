"""Embedded agdb (the storebench_agdb extension) beyond the conformance
suite: the three storage kinds hold the data and compaction shrinks it,
databases persist in their directory and a private one goes on close,
references are edges (the server store's graph model, run in-process), and
the GIL is released while agdb works."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pytest

from storebench.data import filters as F
from storebench.data.batch import DocBatch
from storebench.errors import ForeignDataError
from storebench.stores.base import StoreSpec
from storebench.stores.graph.agdb import DanglingReference
from storebench.stores.graph.agdb_embedded import AgdbEmbeddedStore
from storebench.workloads.social import SEQ, USERS, comment_schema, post_schema
from tests.conftest import make_docs
from tests.stores.test_agdb import check_db_type_and_compaction

native = pytest.importorskip("storebench_agdb", reason="built by tools/setup.py")


def _open(url: str | None = None, **options: object) -> AgdbEmbeddedStore:
    store = StoreSpec("agdb-embedded", url, options=options).open()
    assert isinstance(store, AgdbEmbeddedStore)
    return store


def _rows(ids: list[int], **cols: list) -> DocBatch:
    return DocBatch(
        np.array(ids, np.int64),
        {
            k: np.array(v, dtype=object if isinstance(v[0], str) else np.int64)
            for k, v in cols.items()
        },
    )


@pytest.mark.parametrize("db_type", ["mapped", "file", "memory"])
def test_each_db_type_holds_the_data_and_compaction_shrinks_it_after_deletes(db_type):
    check_db_type_and_compaction(_open(db_type=db_type), db_type)


@pytest.mark.parametrize("db_type", ["mapped", "file"])
def test_a_directory_keeps_its_databases_and_a_private_one_goes(db_type, tmp_path):
    where = tmp_path / "agdb"
    docs = make_docs(100, seed=3)
    store = _open(str(where), db_type=db_type)
    coll = store.create_collection("sbkeep_docs", docs.schema())
    coll.insert(docs)
    store.close()
    assert (where / "sbkeep").is_file()  # the database, and agdb's log beside it
    again = _open(str(where), db_type=db_type)
    try:
        assert again.has_collection("sbkeep_docs")
        kept = again.open_collection("sbkeep_docs", docs.schema())
        assert kept.count() == 100
        assert kept.get(docs.ids[:5]).sorted_by_id().ids.tolist() == docs.ids[:5].tolist()
        with pytest.raises(ForeignDataError):  # another run's data stays
            kept.drop()
    finally:
        again.close()
    private = _open(db_type=db_type)
    directory = private.api.directory
    assert directory is not None and directory.startswith(private.private_dir())
    private.close()
    assert not os.path.exists(directory)


def test_references_are_edges_and_a_dangling_one_writes_nothing():
    store = _open()
    try:
        users = store.create_collection("sb_refs_users", USERS)
        posts = store.create_collection("sb_refs_posts", post_schema(users.name))
        comments = store.create_collection(
            "sb_refs_comments", comment_schema(users.name, posts.name)
        )
        users.insert(_rows([0, 1], name=["a", "b"], email=["a@x", "b@x"]))
        posts.insert(
            _rows([10, 11], seq=[10, 11], author=[0, 1], title=["t", "u"], body=["b", "c"])
        )
        n = 30
        comments.insert(
            _rows(
                list(range(n)),
                seq=list(range(n)),
                post=[10 + i % 2 for i in range(n)],
                author=[i % 2 for i in range(n)],
                body=[f"c{i}" for i in range(n)],
            )
        )
        got = comments.find(F.Cmp("post", "eq", 10), (SEQ, True), 5)
        assert got.ids.tolist() == [28, 26, 24, 22, 20]  # walked back from post 10
        (to_post,) = store.api.exec(
            store.owner,
            "sb_refs",
            [
                {
                    "SelectEdgeCount": {
                        "ids": {"Ids": [{"Alias": "sb_refs_posts"}]},
                        "from": True,
                        "to": False,
                    }
                }
            ],
        )
        assert to_post["result"] == 2  # the posts root's edges: one per post
        with pytest.raises(DanglingReference):
            comments.insert(
                _rows([100, 101], seq=[100, 101], post=[10, 999], author=[0, 0], body=["x", "y"])
            )
        assert comments.count() == n
        for c in (comments, posts, users):
            c.drop()
        assert "sb_refs" not in store._dbs()
    finally:
        store.close()


def test_the_gil_is_released_while_agdb_works():
    # a Python thread keeps counting while another thread is inside agdb: with
    # the GIL held for the call, the counter could not move until it returned
    db = native.Database("memory", "gil")
    n = 20000
    values = [[{"key": {"String": "x"}, "value": {"I64": i}}] for i in range(n)]
    db.exec_mut(
        json.dumps(
            [
                {
                    "InsertNodes": {
                        "count": n,
                        "values": {"Multi": values},
                        "aliases": [],
                        "ids": {"Ids": []},
                    }
                }
            ]
        ).encode()
    )
    everything = json.dumps(
        [
            {
                "SelectValues": {
                    "keys": [],
                    "ids": {
                        "Search": {
                            "algorithm": "Elements",
                            "origin": {"Id": 0},
                            "destination": {"Id": 0},
                            "limit": 0,
                            "offset": 0,
                            "order_by": [{"Desc": {"String": "x"}}],
                            "conditions": [
                                {
                                    "logic": "And",
                                    "modifier": "None",
                                    "data": {
                                        "KeyValue": {
                                            "key": {"String": "x"},
                                            "value": {"GreaterThan": {"I64": -1}},
                                        }
                                    },
                                }
                            ],
                            "reverse": False,
                        }
                    },
                }
            }
        ]
    ).encode()
    count = [0]
    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            count[0] += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        moved = []
        for _ in range(5):
            time.sleep(0.01)
            before = count[0]
            db.exec(everything)  # ~tens of ms of Rust
            moved.append(count[0] - before)
    finally:
        done.set()
        spinner.join()
    assert min(moved) > 0, moved
    with pytest.raises(native.QueryError, match="mutable query not allowed"):
        db.exec(json.dumps([{"RemoveIndex": {"String": "x"}}]).encode())
    db.close()
