"""agdb beyond the conformance suite: the managed server's lifecycle and its
config (127.0.0.1 only, nothing written into the caller's directory), admin
credentials kept out of results, references kept as edges and walked by
find, compaction that shrinks the database, the three db types, and
databases of other users or runs left alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psutil
import pytest

import storebench
from storebench.data import filters as F
from storebench.data.batch import DocBatch
from storebench.servers.agdb import AgdbApi, AgdbError, AgdbServer, find_binary
from storebench.stores.base import StoreSpec
from storebench.stores.graph.agdb import AgdbStore, DanglingReference
from storebench.stores.opening import open_store
from storebench.workloads.social import SEQ, USERS, comment_schema, post_schema
from tests.conftest import make_docs
from tests.stores import servers as S

pytestmark = pytest.mark.skipif(S.skipped("agdb"), reason="STOREBENCH_SKIP_ENGINES")


def shared() -> StoreSpec:
    return StoreSpec("agdb", S.shared_url("agdb"))


def _open(**options: object) -> AgdbStore:
    store = StoreSpec("agdb", S.shared_url("agdb"), options=options).open()
    assert isinstance(store, AgdbStore)
    return store


def test_the_server_binary_is_installed():
    # CI builds it first (python -m storebench.servers.agdb --install)
    assert find_binary() is not None


def test_managed_server_binds_localhost_writes_its_config_first_and_leaves_nothing(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # a config written into the cwd would land here
    opened = open_store(StoreSpec("agdb"))
    store, server = opened.store, opened.server
    try:
        assert isinstance(server, AgdbServer) and server.alive()
        pid, datadir = server.proc.pid, server.dir  # type: ignore[union-attr]
        config = (datadir / "agdb_server.yaml").read_text()
        assert f"bind: 127.0.0.1:{server.port}\n" in config
        assert f"data_dir: {datadir / 'data'}\n" in config
        proc = psutil.Process(pid)
        assert Path(proc.cwd()) == datadir
        listening = {c.laddr.ip for c in proc.net_connections("inet") if c.status == "LISTEN"}
        assert listening == {"127.0.0.1"}
        assert store.spec.url == server.url  # process clients reach the same server
        assert opened.server_facts()["startup_s"] > 0  # type: ignore[index]
        docs = make_docs(300)
        coll = store.create_collection("sb_managed", docs.schema())
        coll.insert(docs)
        assert coll.count() == 300
        assert (datadir / "data").is_dir()
        pids = [p.pid for p in server.processes()]
    finally:
        opened.close()
    assert opened.server is None
    assert all(S.gone(p) for p in [pid, *pids]), "a server process outlived close()"
    assert not datadir.exists()
    assert list(tmp_path.iterdir()) == []  # no agdb_server.yaml, no data in the cwd


def test_admin_credentials_are_random_and_never_reach_results(tmp_path, monkeypatch):
    started: list[AgdbServer] = []
    real = AgdbServer.start

    def spy(self: AgdbServer) -> AgdbServer:
        started.append(self)
        return real(self)

    monkeypatch.setattr(AgdbServer, "start", spy)
    (rec,) = storebench.run(
        "social",
        stores=["agdb"],
        set={
            "posters": 2,
            "posts": 3,
            "commenters": 2,
            "comments": 3,
            "post_readers": 2,
            "post_reads": 3,
            "comment_readers": 2,
            "comment_reads": 3,
            "post_delay_ms": 0,
            "comment_delay_ms": 0,
            "post_read_delay_ms": 0,
            "comment_read_delay_ms": 0,
        },
        results_dir=tmp_path,
    )
    assert rec["status"] == "ok", rec["error"]
    (server,) = started
    secrets = [server._admin, server._admin_password, server.password]
    text = "".join(f.read_text() for f in tmp_path.glob("*.jsonl"))
    assert text and not any(s in text for s in secrets)
    assert ":***@" in str(rec)  # the store's URL is in the record, redacted
    assert not server.alive() and not server.dir.exists()


def test_the_default_admin_password_does_not_work():
    server = S.shared_server("agdb")
    assert isinstance(server, AgdbServer)
    url = f"http://127.0.0.1:{server.port}"
    for user, password in ((server._admin, server._admin), ("admin", "admin")):
        with pytest.raises(AgdbError) as exc:
            AgdbApi(url, user, password)
        assert exc.value.status == 401
    AgdbApi(url, server._admin, server._admin_password).close()  # the real one does


def _social(store: AgdbStore, prefix: str):
    users = store.create_collection(f"{prefix}_users", USERS)
    posts = store.create_collection(f"{prefix}_posts", post_schema(users.name))
    comments = store.create_collection(f"{prefix}_comments", comment_schema(users.name, posts.name))
    return users, posts, comments


def _rows(ids: list[int], **cols: list) -> DocBatch:
    return DocBatch(
        np.array(ids, np.int64),
        {
            k: np.array(v, dtype=object if isinstance(v[0], str) else np.int64)
            for k, v in cols.items()
        },
    )


def test_references_are_edges_and_find_by_reference_walks_them():
    store = _open()
    try:
        users, posts, comments = _social(store, "sb_refs")
        assert users.db == posts.db == comments.db == "sb_refs"  # type: ignore[attr-defined]
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
        # one database: each collection's size is all of it, counted once in a total
        size = users.size_bytes()
        assert size == comments.size_bytes() == store.size_bytes_of(users, posts, comments) > 0
        # the graph: each comment has an edge to its post (and its author)
        api, owner, db = store.api, store.owner, "sb_refs"
        (post10,) = api.exec(owner, db, [{"Search": _index(f"id@{posts.root}", 10)}])  # type: ignore[attr-defined]
        node = post10["elements"][0]["id"]
        (to_post,) = api.exec(
            owner,
            db,
            [{"SelectEdgeCount": {"ids": {"Ids": [{"Id": node}]}, "from": False, "to": True}}],
        )
        assert to_post["result"] == 1 + n // 2  # the posts root's edge + 15 comments
        # find by the reference: the 5 latest comments on post 10, walked from it
        got = comments.find(F.Cmp("post", "eq", 10), (SEQ, True), 5)
        assert got.ids.tolist() == [28, 26, 24, 22, 20]
        assert got.fields["post"].tolist() == [10] * 5
        both = F.And((F.Cmp("post", "eq", 11), F.Cmp("author", "eq", 1), F.Cmp(SEQ, "lt", 9)))
        assert sorted(comments.find(both).ids.tolist()) == [1, 3, 5, 7]
        assert len(comments.find(F.Cmp("post", "eq", 999))) == 0  # no such post: nothing
        # the general path agrees with the walk
        assert sorted(comments.find(F.Or((F.Cmp("post", "eq", 10),))).ids.tolist()) == list(
            range(0, n, 2)
        )
        # a dangling reference writes nothing
        with pytest.raises(DanglingReference):
            comments.insert(
                _rows([100, 101], seq=[100, 101], post=[10, 999], author=[0, 0], body=["x", "y"])
            )
        assert comments.count() == n
        # moving a reference moves its edge
        comments.update(_rows([0], post=[11]))
        assert 0 in comments.find(F.Cmp("post", "eq", 11)).ids.tolist()
        assert 0 not in comments.find(F.Cmp("post", "eq", 10)).ids.tolist()
        for c in (comments, posts, users):
            c.drop()
        assert "sb_refs" not in store._dbs()  # the last drop deleted the db it made
    finally:
        store.close()


def _index(key: str, value: int) -> dict:
    return {
        "algorithm": "Index",
        "origin": {"Id": 0},
        "destination": {"Id": 0},
        "limit": 0,
        "offset": 0,
        "order_by": [],
        "conditions": [
            {
                "logic": "And",
                "modifier": "None",
                "data": {"KeyValue": {"key": {"String": key}, "value": {"Equal": {"I64": value}}}},
            }
        ],
        "reverse": False,
    }


@pytest.mark.parametrize("db_type", ["mapped", "file", "memory"])
def test_each_db_type_holds_the_data_and_compaction_shrinks_it_after_deletes(db_type):
    check_db_type_and_compaction(_open(db_type=db_type), db_type)


def check_db_type_and_compaction(store, db_type: str) -> None:
    """A database of ``db_type`` holds the data, and compaction after
    deletes shrinks it (the server and embedded agdb alike); closes ``store``."""
    try:
        docs = make_docs(2000, seed=7)
        coll = store.create_collection(f"sb{db_type}_shrink", docs.schema(indexed=("tags.i",)))
        assert store._dbs()[f"sb{db_type}"]["db_type"] == db_type
        coll.insert(docs)
        coll.delete(docs.ids[:1500])
        before = coll.size_bytes()
        coll.compact()
        after = coll.size_bytes()
        assert 0 < after < before, (before, after)
        assert coll.count() == 500
        got = coll.get(docs.ids[1490:1510]).sorted_by_id()
        assert got.ids.tolist() == list(range(1500, 1510))
        assert got.vectors.tobytes() == docs.vectors[1500:1510].tobytes()
        coll.drop()
    finally:
        store.close()


def test_filters_convert_values_to_the_field_type():
    docs = make_docs(400, seed=11)
    store = _open()
    try:
        coll = store.create_collection("sbconv_filters", docs.schema())
        coll.insert(docs)
        cases = [
            F.Cmp("tags.i", "lt", 2.5),  # non-integral bound on an int field
            F.Cmp("tags.i", "ge", 47.01),
            F.Cmp("tags.i", "eq", 3.5),
            F.Cmp("tags.i", "ne", 3.5),
            F.Cmp("tags.i", "le", float("inf")),
            F.Range("tags.i", 2.2, 4.8),
            F.In("tags.i", (1.0, 2.5, np.int64(3))),
            F.Cmp("score", "gt", 0),  # an int bound on a float field
            F.Cmp("score", "le", np.float32(0.5)),
            F.In("label", ()),
            F.Not(F.In("label", ("l1", "l2"))),
            F.Cmp("label", "eq", 3),  # a number never equals a string
            F.In("label", ("l", "1")),  # equality, not agdb's substring Any
        ]
        for f in cases:
            want = docs.ids[F.evaluate(f, docs.fields)]
            assert sorted(coll.find(f).ids.tolist()) == sorted(want.tolist()), f
        assert len(coll.find(limit=0)) == 0  # agdb's limit 0 means "all": not here
        coll.drop()
    finally:
        store.close()


def test_drop_leaves_other_users_databases_and_shared_databases_alone():
    server = S.shared_server("agdb")
    assert isinstance(server, AgdbServer)
    url = f"http://127.0.0.1:{server.port}"
    admin = AgdbApi(url, server._admin, server._admin_password)
    admin.admin_user_add("other", "other-password-1")  # a second user, a db named like ours
    other = AgdbApi(url, "other", "other-password-1")
    other.db_add("other", "sbshared", "memory")
    store = _open()
    try:
        docs = make_docs(50)
        mine = store.create_collection("sbshared_mine", docs.schema())
        mine.insert(docs)
        # another store (another run) already has a collection in this db
        store2 = _open()
        theirs = store2.create_collection("sbshared_theirs", docs.schema())
        theirs.insert(docs.slice(0, 5))
        mine.drop()
        assert store.has_collection("sbshared_theirs")  # their collection stays...
        assert "sbshared" in store._dbs()  # ...and the db with it, though this store made it
        theirs.drop()
        store2.close()
        assert "sbshared" in store._dbs()  # store2 did not make the db: it keeps it
        assert [d["db"] for d in other.db_list()] == ["sbshared"]  # the other user's db
    finally:
        # the db the first store made (not empty when it dropped its collection)
        if "sbshared" in store._dbs():
            store.api.db_delete(store.owner, "sbshared")
        store.close()
        other.db_delete("other", "sbshared")
        other.close()
        admin.close()


def test_process_clients_reach_the_same_data():
    # the URL carries the storebench user's password; a spec reopens anywhere
    store = StoreSpec("agdb", S.shared_url("agdb")).open()
    try:
        docs = make_docs(20)
        coll = store.create_collection("sbproc_x", docs.schema())
        coll.insert(docs)
        again = StoreSpec("agdb", store.spec.url).open()
        assert again.open_collection("sbproc_x", docs.schema()).count() == 20
        again.close()
        coll.drop()
    finally:
        store.close()
