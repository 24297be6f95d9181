"""MariaDB beyond the conformance suite: the managed server's lifecycle,
byte-exact strings, compaction, server settings, other people's tables."""

import psutil
import pymysql
import pytest

from storebench.data import filters as F
from storebench.errors import UserError
from storebench.stores.base import StoreSpec
from storebench.stores.opening import open_store
from tests.conftest import make_docs
from tests.stores import servers as S

pytestmark = pytest.mark.skipif(S.skipped("mariadb"), reason="STOREBENCH_SKIP_ENGINES")


def test_managed_server_runs_unprivileged_on_localhost_and_stops_with_the_store():
    opened = open_store(
        StoreSpec("mariadb", options={"settings": {"innodb_flush_log_at_trx_commit": 2}})
    )
    store, server = opened.store, opened.server
    try:
        assert server is not None and server.alive()
        proc = psutil.Process(server.proc.pid)
        if psutil.Process().username() == "root":
            assert proc.username() == "nobody"
        addrs = {c.laddr.ip for c in proc.net_connections("inet") if c.status == "LISTEN"}
        assert addrs == {"127.0.0.1"}
        assert server.password not in " ".join(proc.cmdline())
        assert server.password not in str(store.spec.describe())
        assert not server.init_file.exists()  # the password file is gone once ready
        with store.connection().cursor() as cur:
            cur.execute("SHOW VARIABLES LIKE 'innodb_flush_log_at_trx_commit'")
            assert cur.fetchone()[1] == "2"
        assert store.versions()["engine"].startswith("MariaDB 1")
        pid, datadir = server.proc.pid, server.dir
    finally:
        opened.close()
    assert S.gone(pid)
    assert not datadir.exists()


def managed_settings(options: dict) -> dict:
    """The server variables a managed MariaDB opened with ``options`` ran
    with, as its run record has them."""
    opened = open_store(StoreSpec("mariadb", options=options))
    try:
        return opened.server_facts()["settings"]  # type: ignore[index]
    finally:
        opened.close()


def test_the_managed_server_is_tuned_to_the_machine_unless_asked_for_defaults():
    from storebench.servers.mariadb import machine_settings

    tuned = managed_settings({})
    pool = int(machine_settings()["innodb_buffer_pool_size"].removesuffix("M")) << 20
    assert tuned["tuning"] == "machine"
    # InnoDB rounds the pool up to whole chunks of 128 MB
    assert pool <= int(tuned["innodb_buffer_pool_size"]) < pool + (128 << 20)
    defaults = managed_settings({"tuning": "defaults"})
    assert defaults["tuning"] == "defaults"
    assert defaults["innodb_buffer_pool_size"] == str(128 << 20)
    given = managed_settings({"settings": {"innodb_buffer_pool_size": "256M"}})
    assert given["innodb_buffer_pool_size"] == str(256 << 20)  # the user's wins


def test_strings_compare_byte_for_byte():
    # MariaDB's default collation ignores case and trailing spaces
    store = StoreSpec("mariadb", S.shared_url("mariadb")).open()
    try:
        docs = make_docs(4)
        docs.fields["label"][:] = ["a", "A", "a ", "ä"]
        coll = store.create_collection("sb_bytes", docs.schema(indexed=("label",)))
        coll.insert(docs)
        assert coll.find(F.Cmp("label", "eq", "a")).ids.tolist() == [0]
        assert sorted(coll.find(F.Cmp("label", "ne", "a")).ids.tolist()) == [1, 2, 3]
        coll.drop()
    finally:
        store.close()


def test_compaction_gives_back_the_space_of_deleted_rows():
    store = StoreSpec("mariadb", S.shared_url("mariadb")).open()
    try:
        docs = make_docs(20_000, dim=32)
        coll = store.create_collection("sb_optimize", docs.schema(indexed=("tags.i",)))
        for b in docs.batches(5000):
            coll.insert(b)
        coll.delete(docs.ids[:19_000])
        before = coll.size_bytes()
        coll.compact()
        after = coll.size_bytes()
        assert after < before / 2, (before, after)
        assert coll.count() == 1000
        coll.drop()
    finally:
        store.close()


def test_settings_are_for_the_managed_server_only():
    with pytest.raises(UserError, match="managed server"):
        StoreSpec("mariadb", S.shared_url("mariadb"), options={"settings": {"a": 1}}).open()
    with pytest.raises(UserError, match="expected mysql://"):
        StoreSpec("mariadb", "postgresql://x@127.0.0.1/db").open()


def test_foreign_tables_survive_a_social_run(tmp_path):
    import storebench

    url = S.shared_url("mariadb")
    store = StoreSpec("mariadb", url).open()
    target = store._target
    store.close()
    conn = pymysql.connect(**target, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE someone_elses_notes (id INT PRIMARY KEY, note TEXT)")
            cur.execute("INSERT INTO someone_elses_notes VALUES (1, 'keep me')")
        small = {"posters": 1, "posts": 3, "commenters": 1, "comments": 3, "post_readers": 1}
        small |= {"post_reads": 3, "comment_readers": 1, "comment_reads": 3}
        small |= {k: 1 for k in ("post_delay_ms", "comment_delay_ms")}
        small |= {k: 1 for k in ("post_read_delay_ms", "comment_read_delay_ms")}
        (rec,) = storebench.run(
            "social", stores=[f"mariadb={url}"], set=small, results_dir=tmp_path
        )
        assert rec["status"] == "ok", rec.get("error")
        with conn.cursor() as cur:
            cur.execute("SHOW TABLES")
            tables = [r[0] for r in cur.fetchall()]
            assert "someone_elses_notes" in tables
            assert not [t for t in tables if t.startswith("storebench_")]  # the run's own
            cur.execute("SELECT note FROM someone_elses_notes")
            assert cur.fetchone()[0] == "keep me"
            cur.execute("DROP TABLE someone_elses_notes")
    finally:
        conn.close()
