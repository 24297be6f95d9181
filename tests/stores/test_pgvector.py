"""pgvector beyond the conformance suite: the managed server's lifecycle and
its tuning to the machine, a server killed mid-run, other people's data, the
HNSW index, bulk load."""

import os

import numpy as np
import psutil
import psycopg
import pytest
import yaml

import storebench
from storebench.data.batch import DocBatch
from storebench.errors import UserError
from storebench.servers.postgres import GiB, machine_settings, memory_bytes
from storebench.stores.base import StoreSpec
from storebench.stores.opening import open_store
from storebench.stores.params import HnswSearch
from storebench.stores.sql.pgvector import copy_binary
from tests.conftest import make_docs
from tests.stores import servers as S
from tests.stores.server_checks import no_orphan_after_sigkill

pytestmark = pytest.mark.skipif(S.skipped("pgvector"), reason="STOREBENCH_SKIP_ENGINES")


def test_managed_server_starts_serves_and_stops():
    S.check_managed(StoreSpec("pgvector"))


def test_managed_postgres_runs_unprivileged_on_localhost_only():
    opened = open_store(StoreSpec("pgvector"))
    store, server = opened.store, opened.server
    try:
        proc = psutil.Process(server.proc.pid)
        if psutil.Process().username() == "root":
            assert proc.username() == "nobody"
        addrs = {c.laddr.ip for c in proc.net_connections("inet") if c.status == "LISTEN"}
        assert addrs == {"127.0.0.1"}
        assert server.password not in " ".join(proc.cmdline())
        assert server.password not in str(store.spec.describe())
        assert server.password not in str(store.versions())
    finally:
        opened.close()


def in_force(options: dict) -> tuple[dict, dict]:
    """(what the record says the server ran with, what the server itself
    answers to SHOW on the store's own connection), for a managed server
    opened with ``options``."""
    opened = open_store(StoreSpec("pgvector", options=options))
    try:
        recorded = opened.server_facts()["settings"]  # type: ignore[index]
        conn = opened.store.connection()
        shown = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in recorded
            if name != "tuning"
        }
        given = dict(opened.server.given)  # type: ignore[union-attr]
    finally:
        opened.close()
    assert {k: v for k, v in recorded.items() if k != "tuning"} == shown
    return recorded, given


def test_the_managed_server_runs_tuned_to_the_machine_and_the_record_says_so():
    recorded, given = in_force({})
    assert recorded["tuning"] == "machine"
    total, cores = psutil.virtual_memory().total, os.cpu_count() or 1
    for name in ("shared_buffers", "effective_cache_size", "maintenance_work_mem"):
        assert memory_bytes(name, recorded[name]) == memory_bytes(name, given[name])
    # the rule: a quarter of RAM (at most 8 GB), three quarters for the planner
    shared = memory_bytes("shared_buffers", recorded["shared_buffers"])
    assert shared == max(min(total // 4, 8 * GiB) // (1 << 20) << 20, 128 << 20)
    assert memory_bytes("effective_cache_size", recorded["effective_cache_size"]) >= total * 0.74
    build = memory_bytes("maintenance_work_mem", recorded["maintenance_work_mem"])
    assert 64 << 20 <= build <= max(min(total // 8, 4 * GiB), 64 << 20)
    assert recorded["max_parallel_maintenance_workers"] == str(cores - 1)
    assert recorded["max_parallel_workers"] == str(cores)
    assert recorded["max_connections"] == "500"


def test_tuning_initdb_runs_postgres_defaults():
    recorded, _ = in_force({"tuning": "initdb"})
    assert recorded["tuning"] == "initdb"
    assert recorded["shared_buffers"] == "128MB"
    assert recorded["maintenance_work_mem"] == "64MB"
    assert recorded["effective_cache_size"] == "4GB"
    assert recorded["max_parallel_maintenance_workers"] == "2"
    assert recorded["max_parallel_workers"] == "8"


def test_a_setting_of_the_user_wins_over_either_tuning():
    recorded, _ = in_force(
        {
            "settings": {
                "shared_buffers": "256MB",
                "max_parallel_maintenance_workers": 0,
                "work_mem": "8MB",
            }
        }
    )
    assert recorded["shared_buffers"] == "256MB"  # the user's
    assert recorded["max_parallel_maintenance_workers"] == "0"
    assert recorded["work_mem"] == "8MB"  # given, so recorded
    tuned = machine_settings()["effective_cache_size"]
    assert recorded["effective_cache_size"] == tuned  # the rest of the rule stays
    recorded, _ = in_force({"tuning": "initdb", "settings": {"maintenance_work_mem": "1GB"}})
    assert recorded["maintenance_work_mem"] == "1GB"
    assert recorded["shared_buffers"] == "128MB"


def test_the_run_record_carries_the_settings_the_server_ran_with(tmp_path):
    rec = S.crud_run("pgvector", tmp_path)
    assert rec["status"] == "ok", rec["error"]
    settings = rec["server"]["settings"]
    assert settings["tuning"] == "machine"
    assert settings["shared_buffers"] == machine_settings()["shared_buffers"]
    assert settings["max_parallel_maintenance_workers"] == str((os.cpu_count() or 1) - 1)


def plan_error(tmp_path, options: dict, n: int = 1000) -> str:
    """The one-line error of a crud run on managed pgvector with ``options``,
    refused before anything starts or is written."""
    f = tmp_path / "pg.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "name": "pg",
                "workload": "crud",
                "stores": [{"engine": "pgvector", "options": options}],
                "params": {"n": n},
            }
        )
    )
    with pytest.raises(UserError) as err:
        storebench.run(str(f), results_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    return str(err.value).replace("\n", " ")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"tuning": "fast"}, "option tuning of pgvector: Input should be 'machine' or 'initdb'"),
        (
            {"settings": {"shared_buffers": "lots"}},
            "shared_buffers: 'lots' is not a PostgreSQL memory size",
        ),
        ({"settings": {"shared_buffers": "1 GiB"}}, "is not a PostgreSQL memory size"),
        ({"settings": {"max_parallel_maintenance_workers": -1}}, "not a whole number of 0 or more"),
        ({"settings": {"max_parallel_workers": "two"}}, "not a whole number of 0 or more"),
        ({"settings": {"shared buffers": "1GB"}}, "is not a PostgreSQL setting name"),
        (
            {"maintenance_work_mem": "1gb"},
            "maintenance_work_mem: '1gb' is not a PostgreSQL memory size",
        ),
    ],
)
def test_bad_settings_are_refused_at_plan_time(tmp_path, options, message):
    line = plan_error(tmp_path, options)
    assert "option " in line and "of pgvector" in line and message in line, line


def test_shared_buffers_count_in_the_plan_memory_so_a_run_that_cannot_fit_is_refused(tmp_path):
    line = plan_error(tmp_path, {"settings": {"shared_buffers": "100TB"}})
    assert "a run on pgvector needs about" in line and "store 100.0 TiB" in line, line
    # the tuned server's share: its shared buffers and build memory
    from storebench.stores.sql.pgvector import PgVectorStore

    tuned = machine_settings()
    _, fixed = PgVectorStore.memory_use(StoreSpec("pgvector"), None, 128, 0)
    assert fixed >= memory_bytes("shared_buffers", tuned["shared_buffers"]) + memory_bytes(
        "maintenance_work_mem", "64MB"
    )
    initdb_spec = StoreSpec("pgvector", options={"tuning": "initdb"})
    _, initdb = PgVectorStore.memory_use(initdb_spec, None, 128, 0)
    assert initdb == (128 + 64 + 64) << 20


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_hnsw_index_reaches_the_recall_with_exact_distances(metric):
    url = S.shared_url("pgvector")
    assert (
        S.check_ann(StoreSpec("pgvector", url), {"m": 16, "ef_construct": 200}, 400, metric) >= 0.95
    )


def test_copy_binary_handles_text_columns_and_odd_strings():
    docs = make_docs(50)
    docs.fields["label"][:4] = ["", "ä-ü ß", 'quo"te,\\', "x" * 300]
    store = StoreSpec("pgvector", S.shared_url("pgvector")).open()
    try:
        coll = store.create_collection("sb_copy", docs.schema())
        coll.insert(docs)
        got = coll.get(docs.ids).sorted_by_id()
        assert list(got.fields["label"]) == list(docs.fields["label"])
        assert got.vectors.tobytes() == docs.vectors.tobytes()
        coll.drop()
    finally:
        store.close()
    cols, data = copy_binary(
        docs, ["tags.i", "score", "label"], {"tags.i": "int", "score": "float", "label": "str"}
    )
    assert cols == ["id", "tags.i", "score", "v", "label"]
    assert data.startswith(b"PGCOPY\n\xff\r\n\x00") and data.endswith(b"\xff\xff")


def test_a_killed_server_fails_the_run_quickly_with_its_log(tmp_path, monkeypatch):
    rec, seconds = S.kill_during_run("pgvector", tmp_path, monkeypatch)
    assert rec["status"] == "failed"
    assert seconds < 15
    names = [t["name"] for t in rec["tasks"]]
    assert names[:2] == ["create", "build_index"]
    assert "postgres server died (exit code -9)" in rec["error"]
    assert "ready to accept connections" in rec["error"]  # the log's tail


def test_a_sigkilled_storebench_takes_the_server_and_its_shared_memory():
    # the parent-death signal is the immediate shutdown (SIGQUIT): a SIGKILL
    # would leave the dynamic shared memory (up to maintenance_work_mem) in /dev/shm
    no_orphan_after_sigkill("storebench.servers.postgres", "PostgresServer")


def test_foreign_data_survives_a_full_run(tmp_path):
    url = S.shared_url("pgvector")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE someone_elses (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO someone_elses SELECT g, 'n' || g FROM generate_series(1, 100) g")
        conn.execute("CREATE INDEX someone_elses_note ON someone_elses (note)")
        # a name a careless clean-up by pattern would take
        conn.execute('CREATE TABLE "storebench_00000000_crud" (id bigint)')
        conn.execute('INSERT INTO "storebench_00000000_crud" VALUES (42)')

        def snapshot():
            tables = conn.execute(
                "SELECT relname, relkind FROM pg_class WHERE relnamespace = 'public'::regnamespace ORDER BY 1"
            ).fetchall()
            rows = conn.execute("SELECT * FROM someone_elses ORDER BY id").fetchall()
            mine = conn.execute('SELECT * FROM "storebench_00000000_crud"').fetchall()
            return tables, rows, mine

        before = snapshot()
        try:
            rec = S.crud_run(f"pgvector={url}", tmp_path)
            assert rec["status"] == "ok", rec["error"]
            assert snapshot() == before
        finally:
            conn.execute("DROP TABLE someone_elses")
            conn.execute('DROP TABLE "storebench_00000000_crud"')
    assert rec["store"]["url"].startswith("postgresql://storebench:***@")
    password = S.shared_server("pgvector").password
    assert all(password not in f.read_text() for f in tmp_path.glob("*.jsonl"))


def test_search_params_reach_every_connection():
    store = StoreSpec("pgvector", S.shared_url("pgvector")).open()
    try:
        docs = make_docs(20)
        coll = store.create_collection("sb_ef", docs.schema())
        coll.insert(docs)
        coll.set_search_params(HnswSearch(ef=77))  # before this connection's first search
        coll.search(docs.vectors[:1], 3)
        assert store.connection().execute("SHOW hnsw.ef_search").fetchone()[0] == "77"
        coll.set_search_params(HnswSearch(ef=123))
        coll.search(docs.vectors[:1], 3)
        assert store.connection().execute("SHOW hnsw.ef_search").fetchone()[0] == "123"
        coll.drop()
    finally:
        store.close()
    assert np.__name__  # numpy imported for helpers


def test_insert_of_existing_ids_replaces_them():
    docs = make_docs(100)
    store = StoreSpec("pgvector", S.shared_url("pgvector")).open()
    try:
        coll = store.create_collection("sb_replace", docs.schema())
        coll.insert(docs.slice(0, 60))
        again = make_docs(100, seed=8)  # ids 0..99: 0..59 exist, 60..99 are new
        coll.insert(again)
        assert coll.count() == 100
        got = coll.get(again.ids).sorted_by_id()
        assert list(got.fields["label"]) == list(again.fields["label"])
        assert got.vectors.tobytes() == again.vectors.tobytes()
        coll.drop()
    finally:
        store.close()


def test_a_pipeline_commits_its_statements_together():
    """insert_pipelined ends with one Sync: its statements form one implicit
    transaction, so a failing one takes the others with it (as pgbench's
    \\startpipeline .. \\endpipeline); the next pipeline starts clean."""
    from storebench.data.batch import DocBatch
    from storebench.errors import UserError

    docs = make_docs(50)
    store = StoreSpec("pgvector", S.shared_url("pgvector")).open()
    try:
        coll = store.create_collection("sb_pipeline_tx", docs.schema())
        twice = DocBatch.concat([docs.slice(20, 21), docs.slice(20, 21)])  # one id twice
        with pytest.raises(psycopg.errors.CardinalityViolation):
            coll.insert_pipelined([docs.slice(0, 20), twice])
        assert coll.count() == 0  # the first statement rolled back with the second
        coll.insert_pipelined([docs.slice(0, 20), docs.slice(20, 50)])
        assert coll.count() == 50
        # PostgreSQL's 65535 bind parameters per statement: said, not hit
        with pytest.raises(UserError, match="65535 parameters"):
            coll.insert_pipelined([make_docs(20_000, dim=2)])
        coll.drop()
    finally:
        store.close()


def test_small_inserts_are_one_prepared_insert_and_large_ones_a_copy(monkeypatch):
    """Up to INSERT_ROWS documents: one prepared INSERT .. ON CONFLICT (no
    COPY); more: a COPY. Both replace existing ids and round-trip bit-exact."""
    from storebench.stores.sql.pgvector import collection as PG

    copies = []
    real = PG.copy_binary

    def counting(*a, **kw):
        copies.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(PG, "copy_binary", counting)
    top = PG.INSERT_ROWS
    docs = make_docs(2 * top + 2)
    store = StoreSpec("pgvector", S.shared_url("pgvector")).open()
    try:
        coll = store.create_collection("sb_small_inserts", docs.schema())
        coll.insert(docs.slice(0, 1))
        coll.insert(docs.slice(1, top + 1))  # the largest INSERT
        assert copies == []
        again = make_docs(top + 1, seed=5)  # ids 0..top exist: replaced, by a COPY
        coll.insert(again)
        assert copies == [1]
        coll.insert(docs.slice(top + 1, 2 * top + 2))  # fresh ids, the upper half
        assert coll.count() == 2 * top + 2
        got = coll.get(docs.ids).sorted_by_id()
        want = DocBatch.concat([again, docs.slice(top + 1, 2 * top + 2)])
        assert list(got.fields["label"]) == list(want.fields["label"])
        assert list(got.fields["score"]) == list(want.fields["score"])
        assert got.vectors.tobytes() == want.vectors.tobytes()
        small = make_docs(3, seed=6)  # existing ids through the INSERT: replaced
        coll.insert(small)
        got = coll.get(small.ids).sorted_by_id()
        assert list(got.fields["tags.i"]) == list(small.fields["tags.i"])
        assert got.vectors.tobytes() == small.vectors.tobytes()
        assert coll.count() == 2 * top + 2
        # prepared on the server, once per shape
        conn = store.connection()
        prepared = conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ['INSERT INTO "sb_small_inserts"%'],
        ).fetchone()[0]
        assert prepared >= 2
        coll.drop()
    finally:
        store.close()


@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_search_binds_the_vector_once_uses_the_index_and_finds_what_the_old_query_did(metric):
    """The search statement (the vector bound once, ``ORDER BY d``) is an
    HNSW index scan, prepared once per connection; it returns the ids and
    distances of the statement it replaced (``SELECT id, v <-> %s ..
    ORDER BY v <-> %s``, the vector bound twice), query by query, filtered
    or not."""
    from storebench.data.filters import Cmp
    from storebench.stores.params import HnswIndex

    docs = make_docs(3000, dim=32, seed=3)
    queries = make_docs(40, dim=32, seed=4).vectors
    if metric != "l2":
        docs.vectors[:] /= np.linalg.norm(docs.vectors, axis=1, keepdims=True)
    store = StoreSpec("pgvector", S.shared_url("pgvector")).open()
    try:
        coll = store.create_collection("sb_query_shape", docs.schema(metric))
        for b in docs.batches(1000):
            coll.insert(b)
        coll.build_index(HnswIndex(m=16, ef_construct=64))
        coll.set_search_params(HnswSearch(ef=40))
        res = coll.search(queries, 10)
        for j in range(0, len(queries), 7):  # one vector per call: the search ops' case
            one = coll.search(queries[j : j + 1], 10)
            assert one.ids.tolist() == res.ids[j : j + 1].tolist()
            assert one.distances.tolist() == res.distances[j : j + 1].tolist()
            assert one.ids.dtype == np.int64 and one.distances.dtype == np.float32
        where = Cmp("label", "eq", docs.fields["label"][0])
        filtered = coll.search(queries, 10, where)
        conn = store.connection()
        op = {"l2": "<->", "cosine": "<=>"}[metric]
        t = '"sb_query_shape"'
        for sql, ids, dist in [
            (f"SELECT id, v {op} %s FROM {t} ORDER BY v {op} %s LIMIT 10", res.ids, res.distances),
            (
                f"SELECT id, v {op} %s FROM {t} WHERE label = %s ORDER BY v {op} %s LIMIT 10",
                filtered.ids,
                filtered.distances,
            ),
        ]:
            for j, v in enumerate(queries):
                params = [v, v] if "WHERE" not in sql else [v, where.value, v]
                rows = conn.cursor(binary=True).execute(sql, params).fetchall()
                assert sorted(ids[j, : len(rows)].tolist()) == sorted(r[0] for r in rows)
                assert (ids[j, len(rows) :] == -1).all()
                np.testing.assert_allclose(
                    dist[j, : len(rows)], sorted(r[1] for r in rows), rtol=1e-6
                )
                assert (np.diff(dist[j, : len(rows)]) >= 0).all()
        for wsql, params in [("", []), (' WHERE "label" = %s', [where.value])]:
            plan = conn.execute(
                "EXPLAIN " + coll._knn_sql(10, wsql, "%s"), [queries[0], *params]
            ).fetchall()
            text = "\n".join(r[0] for r in plan)
            assert 'Index Scan using "sb_query_shape_hnsw"' in text or (
                "Index Scan using sb_query_shape_hnsw" in text
            ), text
            assert f"Order By: (v {op}" in text, text
        # prepared, the statement runs with the generic plan after five runs: that too
        plan = conn.execute("EXPLAIN (GENERIC_PLAN) " + coll._knn_sql(10, "", "$1")).fetchall()
        text = "\n".join(r[0] for r in plan)
        assert "Index Scan using sb_query_shape_hnsw" in text and "Order By: (v" in text, text
        # prepared on the server once for this connection, the vector its one parameter
        prepared = conn.execute(
            "SELECT parameter_types::text FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%FROM (SELECT id, v%sb_query_shape%"],
        ).fetchall()
        assert prepared.count(("{vector}",)) == 1  # the filtered one: psycopg's to prepare
        coll.drop()
    finally:
        store.close()


def test_search_of_an_empty_collection_pads_and_a_broken_statement_raises():
    docs = make_docs(5)
    store = StoreSpec("pgvector", S.shared_url("pgvector")).open()
    try:
        coll = store.create_collection("sb_empty_search", docs.schema())
        for q in (1, 2):
            res = coll.search(docs.vectors[:q], 3)
            assert res.ids.shape == (q, 3) and (res.ids == -1).all()
            assert np.isinf(res.distances).all()
        coll.insert(docs.slice(0, 2))  # fewer than k: padded
        res = coll.search(docs.vectors[:1], 3)
        assert res.ids.tolist() == [[0, 1, -1]] and np.isinf(res.distances[0, 2])
        coll.insert(docs)
        res = coll.search(docs.vectors[:2], 3)
        assert res.ids[:, 0].tolist() == docs.ids[:2].tolist()
        with pytest.raises(psycopg.errors.DataException):  # the wrong dimension
            coll.search(np.zeros((1, 3), np.float32), 3)
        assert coll.search(docs.vectors[:1], 2).ids[0, 0] == docs.ids[0]  # still usable
        coll.drop()
    finally:
        store.close()
