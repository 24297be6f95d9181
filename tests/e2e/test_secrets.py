"""No secret leaves storebench. Every URL form each store accepts gets a
random secret; the CLI runs them (failing to connect to a closed port, or
working against the managed Redis and PostgreSQL the tests start), then
show, report, compare and export read the records. The secret's parts must
appear in no output: files, stdout, stderr (with -v logging)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from storebench.stores.base import engine_names

CLI = [sys.executable, "-m", "storebench"]
# every character a secret may hold that a form must survive
SPECIALS = "@:/&' \"?#%=+;"


def sb(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


class Secret:
    """A random secret with special characters between two random parts:
    neither part may show anywhere, in any encoding (each survives all)."""

    def __init__(self) -> None:
        self.parts = ["Qz" + secrets.token_hex(8), "Wy" + secrets.token_hex(8)]
        self.value = f"{self.parts[0]}{SPECIALS}{self.parts[1]}"
        self.word = "".join(self.parts)  # no specials: for a bare libpq value, a user name

    @property
    def enc(self) -> str:  # percent-encoded, as a URL needs it
        return quote(self.value, safe="")

    @property
    def raw(self) -> str:  # @ and : as they are (a URL's userinfo allows them)
        return f"{self.parts[0]}@:{self.parts[1]}"

    @property
    def libpq(self) -> str:  # a libpq quoted value
        return "'" + self.value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Each store's URL forms ({port}: a port; {s}: a Secret). Stores not here
# take a file or directory path, or no URL at all.
FORMS: dict[str, list[str]] = {
    "pgvector": [
        "postgresql://bench:{s.enc}@127.0.0.1:{port}/bench",
        "postgres://bench@127.0.0.1:{port}/bench?sslmode=disable&password={s.enc}",
        "host=127.0.0.1 port={port} user=bench password={s.word} dbname=bench",
        "host=127.0.0.1 port={port} user=bench password={s.libpq} dbname=bench",
    ],
    "redis": [
        "redis://:{s.enc}@127.0.0.1:{port}/0",
        "redis://default:{s.raw}@127.0.0.1:{port}/0",
        "redis://127.0.0.1:{port}/0?password={s.enc}",
    ],
    "falkordb": [
        "redis://:{s.enc}@127.0.0.1:{port}/0",
        "redis://127.0.0.1:{port}/0?username=u&password={s.enc}",
    ],
    "milvus": ["http://root:{s.enc}@127.0.0.1:{port}", "https://root:{s.raw}@127.0.0.1:{port}"],
    "elasticsearch": ["http://elastic:{s.enc}@127.0.0.1:{port}"],
    "opensearch": ["http://admin:{s.enc}@127.0.0.1:{port}"],
    "agdb": ["http://bench:{s.enc}@127.0.0.1:{port}"],
    "mariadb": [
        "mysql://bench:{s.enc}@127.0.0.1:{port}/bench",
        "mariadb://bench:{s.raw}@127.0.0.1:{port}/bench",
    ],
    "arangodb": ["http://root:{s.enc}@127.0.0.1:{port}/bench"],
    "mongodb": ["mongodb://bench:{s.enc}@127.0.0.1:{port}/bench"],
    "weaviate": ["http://bench:{s.enc}@127.0.0.1:{port}?grpc_port={port}"],
}
# The environment variables each store reads a credential from, and a URL
# that leaves the credential to it. Its value is planted as the user name
# too: only the environment rule can remove it there (it stands for a
# client that echoes the value).
ENV_FORMS: dict[str, tuple[str, str]] = {
    "PGPASSWORD": ("pgvector", "host=127.0.0.1 port={port} user={s.word} dbname=bench"),
    "REDIS_PASSWORD": ("redis", "redis://127.0.0.1:{port}/0?client_name={s.word}"),
    "MILVUS_TOKEN": ("milvus", "http://127.0.0.1:{port}/{s.word}"),
    "MILVUS_PASSWORD": ("milvus", "http://127.0.0.1:{port}/x{s.word}"),
    "STOREBENCH_ELASTICSEARCH_PASSWORD": ("elasticsearch", "http://{s.word}@127.0.0.1:{port}"),
    "STOREBENCH_OPENSEARCH_PASSWORD": ("opensearch", "http://{s.word}@127.0.0.1:{port}"),
    "AGDB_PASSWORD": ("agdb", "http://{s.word}@127.0.0.1:{port}"),
    "MYSQL_PWD": ("mariadb", "mysql://{s.word}@127.0.0.1:{port}/bench"),
    "STOREBENCH_ARANGODB_PASSWORD": ("arangodb", "http://{s.word}@127.0.0.1:{port}/bench"),
}
PATH_STORES = {
    "null", "memory", "sqlite", "sqlite-vec", "duckdb", "lancedb", "chroma", "hnswlib",
    "faiss", "usearch", "qdrant-edge", "kuzu", "mongita", "agdb-embedded", "milvus-lite",
}  # fmt: skip


def scenario(tmp_path: Path, workload: str = "ingest") -> str:
    path = tmp_path / f"leak-{workload}.yaml"
    params = (
        "{count: 20}"
        if workload == "ingest"
        else "{n: 200, dim: 8, ops: 20, warmup: 2, batch_size: 100, k: 5}"
    )
    path.write_text(f"name: leak\nworkload: {workload}\nstores: [sqlite]\nparams: {params}\n")
    return str(path)


def outputs_leak(tmp_path: Path, results: Path, secrets_: list[Secret], texts: list[str]) -> None:
    """Run every command that reads the records; fail on any secret part in
    any output of those or of ``texts`` (the runs' stdout and stderr)."""
    texts = list(texts)
    rep, csv, pq = tmp_path / "report", tmp_path / "runs.csv", tmp_path / "runs.parquet"
    for args in (
        ["-v", "show", str(results)],
        ["-v", "report", str(results), "--out", str(rep)],
        ["-v", "compare", str(results), str(results)],
        ["-v", "compare", "--json", str(results), str(results)],
        ["-v", "export", str(results), "--out", str(csv)],
        ["-v", "export", str(results), "--out", str(pq)],
    ):
        r = sb(*args)
        texts += [r.stdout, r.stderr]
        # compare may find no ok runs; everything else must work
        assert r.returncode == 0 or args[1] == "compare", (args, r.stderr)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".jsonl" for p in files) and csv.exists()
    texts += [p.read_bytes().decode("latin-1") for p in files]
    import pyarrow.parquet as parquet  # compressed pages: read the values back

    texts.append(json.dumps(parquet.read_table(pq).to_pylist(), default=str))
    for s in secrets_:
        for part in s.parts:
            hits = [t[max(0, t.find(part) - 80) : t.find(part) + 40] for t in texts if part in t]
            assert not hits, f"secret part {part} of {s.value!r} leaked: {hits[0]!r}"


def test_the_forms_cover_every_registered_store():
    assert set(FORMS) | PATH_STORES == set(engine_names())
    assert not set(FORMS) & PATH_STORES
    assert {engine for engine, _ in ENV_FORMS.values()} <= set(FORMS)


def test_a_failed_connection_leaks_no_secret_of_any_form(tmp_path):
    port = closed_port()
    planted, stores = [], []
    for engine, forms in FORMS.items():
        for form in forms:
            s = Secret()
            planted.append(s)
            stores += ["--store", f"{engine}={form.format(port=port, s=s)}"]
    env = {}
    for var, (engine, form) in ENV_FORMS.items():
        s = Secret()
        planted.append(s)
        env[var] = s.word
        stores += ["--store", f"{engine}={form.format(port=port, s=s)}"]
    results = tmp_path / "results"
    r = sb("-v", "run", scenario(tmp_path), *stores, "--results", str(results), env=env)
    assert r.returncode == 1, r.stderr  # every run failed, and said so
    recs = [json.loads(line) for line in (results / "leak.jsonl").read_text().splitlines()]
    assert len(recs) == len(planted) and {x["status"] for x in recs} == {"failed"}
    assert all(x["error"] for x in recs)
    # a masked value where each secret was: the forms were recognised, not dropped
    assert sum("***" in x["store"]["url"] for x in recs) == len(planted)
    outputs_leak(tmp_path, results, planted, [r.stdout, r.stderr])


def test_a_bad_store_url_is_one_line_without_its_secret(tmp_path):
    s = Secret()
    url = f"redis://:{s.enc}@127.0.0.1:notaport/0?password={s.enc}"
    r = sb("run", scenario(tmp_path), "--store", f"redis={url}", "--results", str(tmp_path))
    assert r.returncode in (1, 2)
    assert not [p for p in s.parts if p in r.stdout + r.stderr], r.stderr


# --- working runs against the managed servers ------------------------------------


@pytest.fixture
def redis_user():
    """A second Redis user with a secret full of special characters."""
    import redis

    from tests.stores.servers import shared_server

    server = shared_server("redis")
    s = Secret()
    name = "sbleak" + secrets.token_hex(4)
    admin = redis.Redis(host="127.0.0.1", port=server.port, password=server.password)
    admin.execute_command("ACL", "SETUSER", name, "on", f">{s.value}", "~*", "&*", "+@all")
    try:
        yield server, name, s
    finally:
        admin.execute_command("ACL", "DELUSER", name)
        admin.close()


@pytest.fixture
def pg_role():
    """A second PostgreSQL role with a secret full of special characters."""
    import psycopg
    from psycopg import sql

    from tests.stores.servers import shared_server

    server = shared_server("pgvector")
    s = Secret()
    name = "sbleak" + secrets.token_hex(4)
    with psycopg.connect(server.url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                sql.Identifier(name), sql.Literal(s.value)
            )
        )
    try:
        yield server, name, s
    finally:
        with psycopg.connect(server.url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_working_runs_on_redis_and_postgres_leak_no_secret(tmp_path, redis_user, pg_role):
    from storebench.servers.postgres import DATABASE

    rserver, ruser, rs = redis_user
    pserver, prole, ps = pg_role
    rp, pp = rserver.port, pserver.port
    runs = [
        f"redis=redis://{ruser}:{rs.enc}@127.0.0.1:{rp}/0",
        f"redis=redis://127.0.0.1:{rp}/0?username={ruser}&password={quote_plus(rs.value)}",
        f"redis=redis://127.0.0.1:{rp}/0?password={rserver.password}",  # the default user
        f"pgvector=postgresql://{prole}:{ps.enc}@127.0.0.1:{pp}/{DATABASE}",
        f"pgvector=postgresql://{prole}@127.0.0.1:{pp}/{DATABASE}?password={ps.enc}",
        f"pgvector=host=127.0.0.1 port={pp} user={prole} password={ps.libpq} dbname={DATABASE}",
    ]
    results = tmp_path / "results"
    stores = [a for x in runs for a in ("--store", x)]
    first = sb("-v", "run", scenario(tmp_path, "crud"), *stores, "--results", str(results))
    assert first.returncode == 0, first.stderr
    # the environment's secrets: REDIS_PASSWORD and PGPASSWORD fill in what the
    # URL leaves out; a role named like the password fails, and PostgreSQL's
    # own message echoes that name: only the environment rule removes it
    env = {"REDIS_PASSWORD": rserver.password, "PGPASSWORD": ps.value}
    env_runs = [
        f"redis=redis://127.0.0.1:{rp}/0",
        f"pgvector=host=127.0.0.1 port={pp} user={prole} dbname={DATABASE}",
        f"pgvector=host=127.0.0.1 port={pp} user={ps.libpq} dbname={DATABASE}",
    ]
    second = sb(
        "-v",
        "run",
        scenario(tmp_path, "crud"),
        *[a for x in env_runs for a in ("--store", x)],
        "--results",
        str(results),
        env=env,
    )
    assert second.returncode == 1, second.stderr  # the echoing run failed, the others not
    recs = [json.loads(line) for line in (results / "leak.jsonl").read_text().splitlines()]
    assert [x["status"] for x in recs] == ["ok"] * 8 + ["failed"]
    assert "password authentication failed for user" in recs[-1]["error"]
    assert "***" in recs[-1]["error"]  # where the echoed value was
    assert all(x["tasks"] for x in recs[:8])
    server_secret = Secret()  # the default user's password, as parts
    server_secret.parts = [rserver.password]
    texts = [first.stdout, first.stderr, second.stdout, second.stderr]
    outputs_leak(tmp_path, results, [rs, ps, server_secret], texts)
    # --resume: the same runs (the key holds no secret) are done already
    again = sb("run", scenario(tmp_path, "crud"), *stores, "--resume", "--results", str(results))
    assert again.returncode == 0, again.stderr
    assert "0 run(s)" in again.stderr
    assert len((results / "leak.jsonl").read_text().splitlines()) == len(recs)


def test_an_error_line_shows_no_secret(tmp_path):
    s = Secret()
    missing = tmp_path / f"none?password={s.enc}"
    r = sb("show", str(missing))
    assert r.returncode == 2
    assert r.stderr.startswith("storebench: error: ") and r.stderr.count("\n") == 1
    assert "password=***" in r.stderr
    assert not [p for p in s.parts if p in r.stderr + r.stdout], r.stderr
