"""The social study's graph and document engines (kuzu, falkordb, mongita,
mariadb, and postgres = pgvector without vectors): references between
collections, and the social scenario end to end in both modes (embedded
agdb too; the agdb server's run is in test_agdb.py)."""

from pathlib import Path

import numpy as np
import pytest
import yaml

import storebench
from storebench.data.batch import DocBatch
from storebench.data.filters import And, Cmp, Not, Range
from storebench.errors import StorebenchError, UserError
from storebench.stores.base import Capability, StoreSpec, store_class
from storebench.workloads.social import USERS, comment_schema, post_schema
from tests.stores import servers as S

GRAPHS = ["kuzu", "falkordb"]  # references are edges
DOCUMENTS = ["mongita", "mariadb", "pgvector"]  # references are int fields


def spec_for(engine: str, tmp: Path) -> StoreSpec:
    if engine == "kuzu":
        return StoreSpec("kuzu", str(tmp / "kuzu.db"))
    if engine == "mongita":
        return StoreSpec("mongita", str(tmp / "mongita"))
    if S.skipped(engine):
        pytest.skip(f"{engine} skipped by STOREBENCH_SKIP_ENGINES")
    return StoreSpec(engine, S.shared_url(engine))


def users(n: int) -> DocBatch:
    return DocBatch(
        np.arange(n, dtype=np.int64),
        {
            "name": np.array([f"user{i}" for i in range(n)], object),
            "email": np.array([f"u{i}@a.b" for i in range(n)], object),
        },
    )


def posts(ids: list[int], authors: list[int]) -> DocBatch:
    return DocBatch(
        np.array(ids, np.int64),
        {
            "seq": np.array(ids, np.int64),
            "author": np.array(authors, np.int64),
            "title": np.array([f"title {i}" for i in ids], object),
            "body": np.array([f"body {i}" for i in ids], object),
        },
    )


def comments(ids: list[int], post_ids: list[int], author: int = 0) -> DocBatch:
    return DocBatch(
        np.array(ids, np.int64),
        {
            "seq": np.array(ids, np.int64),
            "post": np.array(post_ids, np.int64),
            "author": np.full(len(ids), author, np.int64),
            "body": np.array([f"comment {i}" for i in ids], object),
        },
    )


@pytest.fixture(params=GRAPHS + DOCUMENTS)
def social(request, tmp_path):
    engine = request.param
    store = spec_for(engine, tmp_path).open()
    made = []
    try:
        u = store.create_collection("sb_refs_users", USERS)
        made.append(u)
        p = store.create_collection("sb_refs_posts", post_schema(u.name))
        made.append(p)
        c = store.create_collection("sb_refs_comments", comment_schema(u.name, p.name))
        made.append(c)
        u.insert(users(3))
        p.insert(posts([10, 11, 12], [0, 1, 2]))
        c.insert(comments([100, 101, 102, 103], [12, 12, 11, 12], author=1))
        yield engine, store, u, p, c
    finally:
        for coll in made:  # users first: a graph store drops the edges into it too
            if coll.name in store._created:
                coll.drop()
        store.close()


def test_references_read_back_and_find_by_reference_in_order(social):
    _engine, _store, _u, p, c = social
    got = c.find(Cmp("post", "eq", 12), ("seq", True), 2)
    assert got.ids.tolist() == [103, 101]
    assert got.fields["post"].tolist() == [12, 12]
    assert got.fields["author"].tolist() == [1, 1]
    latest = p.find(None, ("seq", True), 1)
    assert latest.ids.tolist() == [12] and latest.fields["author"].tolist() == [2]
    full = c.get(np.array([102, 100], np.int64)).sorted_by_id()
    assert full.fields["post"].tolist() == [12, 11]
    # references inside a larger filter (the residual part of a graph query)
    where = And((Cmp("post", "eq", 12), Not(Cmp("author", "eq", 0)), Range("seq", 101, 200)))
    assert sorted(c.find(where).ids.tolist()) == [101, 103]
    assert sorted(c.find(Not(Cmp("post", "eq", 12))).ids.tolist()) == [102]


def test_updating_a_reference_repoints_it(social):
    _engine, _store, _u, _p, c = social
    c.update(DocBatch(np.array([100], np.int64), {"post": np.array([10], np.int64)}))
    assert c.find(Cmp("post", "eq", 10)).ids.tolist() == [100]
    assert sorted(c.find(Cmp("post", "eq", 12)).ids.tolist()) == [101, 103]
    # an insert of an existing id replaces it, references included
    c.insert(comments([101], [11]))
    assert sorted(c.find(Cmp("post", "eq", 11)).ids.tolist()) == [101, 102]
    assert c.count() == 4


def test_a_reference_to_nothing(social):
    engine, _store, _u, p, c = social
    if engine in GRAPHS:  # an edge needs both ends: the insert fails
        with pytest.raises(StorebenchError, match="missing"):
            c.insert(comments([200, 201], [12, 999]))
        # kuzu rolls the batch back; falkordb (no multi-statement
        # transactions) keeps the rows whose reference exists
        assert c.count() == (5 if engine == "falkordb" else 4)
        assert c.get(np.array([201], np.int64)).ids.tolist() == []
        # a deleted target takes its edges: the reference reads -1
        p.delete(np.array([11], np.int64))
        assert c.get(np.array([102], np.int64)).fields["post"].tolist() == [-1]
    else:  # a document store keeps the number
        c.insert(comments([200], [999]))
        assert c.get(np.array([200], np.int64)).fields["post"].tolist() == [999]


SMALL = {
    "posters": 2,
    "posts": 6,
    "post_delay_ms": 5,
    "commenters": 2,
    "comments": 6,
    "comment_delay_ms": 5,
    "post_readers": 3,
    "post_reads": 6,
    "post_read_delay_ms": 5,
    "comment_readers": 3,
    "comment_reads": 6,
    "comment_read_delay_ms": 5,
    "max_wait_s": 5,
}


def _scenario(tmp: Path, store: dict, mode: str) -> Path:
    path = tmp / f"social-{store['engine']}-{mode}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "social",
                "workload": "social",
                "stores": [store],
                "mode": mode,
                "params": SMALL,
            }
        )
    )
    return path


@pytest.mark.parametrize("mode", ["default", "compat"])
@pytest.mark.parametrize(
    "engine",
    [
        "kuzu",
        "kuzu:memory",
        "falkordb",
        "mongita",
        "mariadb",
        "postgres:sync-off",
        "agdb-embedded",
        "agdb-embedded:memory",
    ],
)
def test_social_runs_end_to_end(engine, mode, tmp_path):
    name, _, variant = engine.partition(":")
    store: dict = {"engine": name}
    if name in ("falkordb", "mariadb"):
        store["url"] = spec_for(name, tmp_path).url
    if variant == "memory":
        store["options"] = {"db_type" if name.startswith("agdb") else "mode": "memory"}
    if name == "postgres":  # the social study's postgres: pgvector, no vectors
        store = {
            "engine": "pgvector",
            "url": spec_for("pgvector", tmp_path).url,
            "options": {"synchronous_commit": "off"},
        }
    (rec,) = storebench.run(str(_scenario(tmp_path, store, mode)), results_dir=tmp_path / "r")
    assert rec["status"] == "ok", rec.get("error")
    tasks = {t["name"]: t for t in rec["tasks"]}
    assert tasks["creating_users"]["ops"] == 4
    assert rec["metrics"]["posts"] == tasks["write_posts"]["ops"] == 12
    assert rec["metrics"]["comments"] == tasks["write_comments"]["ops"] > 0
    # every read ran: counted, or skipped as having found no post yet (on a
    # loaded machine the readers' few ms can all come before the first post)
    reads = tasks["read_posts"]
    assert (
        reads["ops"] + sum(reads["skipped"].values()) == SMALL["post_readers"] * SMALL["post_reads"]
    )
    assert rec["metrics"]["method"].startswith("compat" if mode == "compat" else "corrected")
    caps = store_class(store["engine"]).capabilities
    if Capability.SIZE in caps and variant != "memory":
        assert rec["metrics"]["db_size_bytes"] > 0
    if Capability.COMPACT in caps:
        assert rec["metrics"]["db_size_after_compact_bytes"] > 0


def test_pgvector_takes_schemas_without_vectors_and_the_commit_mode():
    if S.skipped("pgvector"):
        pytest.skip("pgvector skipped by STOREBENCH_SKIP_ENGINES")
    url = S.shared_url("pgvector")
    for value, want in (("off", "off"), (False, "off"), ("on", "on")):
        store = StoreSpec("pgvector", url, options={"synchronous_commit": value}).open()
        try:
            assert store.connection().execute("SHOW synchronous_commit").fetchone()[0] == want
            coll = store.create_collection("sb_novec", USERS)
            coll.insert(users(5))
            assert coll.get(np.array([1, 4], np.int64)).vectors is None
            assert coll.size_bytes() > 0
            coll.drop()
        finally:
            store.close()
    with pytest.raises(UserError, match="synchronous_commit"):
        StoreSpec("pgvector", url, options={"synchronous_commit": "sometimes"}).open()
