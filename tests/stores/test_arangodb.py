"""The arangodb store without an ArangoDB.

ArangoDB cannot be installed here: no registry this project installs from
has a server package, so the store runs only by URL and the conformance
suite enrols it only when ``STOREBENCH_ARANGODB_URL`` names a real server
(tests/stores/conftest.py). This module checks what can be checked without
one:

- the refusal of a spec without a URL, through the real CLI and scenario
  path (one line, exit 2, nothing written);
- the AQL filter compiler against the numpy reference semantics, by
  construction: ``AqlExpr`` below evaluates the AQL subset the compiler
  emits with AQL's comparison rules (type order null < bool < number <
  string, numbers by value, strings here only lowercase letters and digits,
  where ICU's order is code-point order), and random filter trees must give
  the reference's masks;
- the adapter's HTTP requests, against ``FakeArango``: a STAND-IN, not
  ArangoDB. It is a small stdlib ``http.server`` on 127.0.0.1 that
  implements only what the adapter calls for connect, create, insert
  (``/_api/document`` and ``/_api/import``), get, count and drop, answers
  ``x-arango-async: true`` requests with 202 before doing the work (it does
  it when the test says so), and records every request. Passing against it
  says the adapter sends the requests it means to (paths, bodies, headers),
  not that a real ArangoDB accepts them.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np
import pytest

from storebench.data import filters as F
from storebench.data.batch import DocBatch, Schema
from storebench.errors import ForeignDataError, UserError
from storebench.stores.base import StoreSpec
from storebench.stores.document.arangodb import URL_FORM, ArangoStore, key, to_aql
from tests.conftest import make_docs

# --- the no-URL refusal ---------------------------------------------------------

CLI = [sys.executable, "-m", "storebench"]
MESSAGE = f"arangodb runs only by URL here (storebench has no server of its own to start for it): --store arangodb={URL_FORM}"


def _refused(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storebench: error: "), r.stderr
    return lines[0]


def test_store_without_url_is_refused_by_the_cli_before_anything_starts(tmp_path):
    r = subprocess.run(
        [*CLI, "run", "ingest", "--store", "arangodb", "--results", str(tmp_path / "res")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = _refused(r)
    assert line == f"storebench: error: --store: {MESSAGE}"
    assert not (tmp_path / "res").exists()


def test_store_without_url_is_refused_in_a_scenario_file_with_its_line(tmp_path):
    sc = tmp_path / "arango.yaml"
    sc.write_text("name: a\nworkload: ingest\nstores:\n  - sqlite\n  - arangodb\n")
    r = subprocess.run(
        [*CLI, "run", str(sc), "--results", str(tmp_path / "res")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = _refused(r)
    assert f"{sc}:5: stores.1: {MESSAGE}" in line
    assert not (tmp_path / "res").exists()


def test_store_without_url_is_refused_when_opened_directly():
    with pytest.raises(UserError, match=re.escape(MESSAGE)):
        StoreSpec("arangodb").open()


def test_url_forms(monkeypatch):
    monkeypatch.delenv("STOREBENCH_ARANGODB_USERNAME", raising=False)
    monkeypatch.delenv("STOREBENCH_ARANGODB_PASSWORD", raising=False)
    t = ArangoStore.check_url("http://me:s%40cret@db.example:8530/bench")
    assert t == {
        "host": "http://db.example:8530",
        "database": "bench",
        "username": "me",
        "password": "s@cret",
    }
    t = ArangoStore.check_url("https://db.example")  # ArangoDB's port, the _system database
    assert (t["host"], t["database"], t["username"], t["password"]) == (
        "https://db.example:8529",
        "_system",
        "root",
        "",
    )
    monkeypatch.setenv("STOREBENCH_ARANGODB_USERNAME", "envuser")
    monkeypatch.setenv("STOREBENCH_ARANGODB_PASSWORD", "envpw")
    t = ArangoStore.check_url("http://[::1]:8529/x")
    assert (t["host"], t["username"], t["password"]) == ("http://[::1]:8529", "envuser", "envpw")
    for bad in ("tcp://host:8529/db", "http:///db", "http://h:8529/a/b"):
        with pytest.raises(UserError, match="arangodb url"):
            ArangoStore.check_url(bad)


# --- AQL compilation, checked against the numpy reference ------------------------

_TYPE_RANK = {type(None): 0, bool: 1, int: 2, float: 2, str: 3}
_PY_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def aql_compare(a: Any, op: str, b: Any) -> bool:
    """AQL's comparison of two scalars: by type rank first, then by value."""
    ra, rb = _TYPE_RANK[type(a)], _TYPE_RANK[type(b)]
    if ra != rb:
        return _PY_CMP[op](ra, rb)
    return _PY_CMP[op](a, b)


class AqlExpr:
    """A parser and evaluator for the AQL boolean expressions ``to_aql``
    emits: OR, AND, NOT, parentheses, ``== != < <= > >=``, ``IN``, ``true``,
    ``false``, ``d.@attr`` and ``@value``. Evaluates row by row over columns
    keyed by attribute name."""

    TOKEN = re.compile(
        r"\s*(==|!=|<=|>=|<|>|\(|\)|d\.@\w+|@\w+|AND\b|OR\b|NOT\b|IN\b|true\b|false\b)"
    )

    def __init__(self, text: str, bind: dict[str, Any]):
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            m = self.TOKEN.match(text, pos)
            assert m, f"unexpected AQL at {text[pos:]!r}"
            self.tokens.append(m.group(1))
            pos = m.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.bind = bind
        self.used: set[str] = set()
        self.i = 0
        self.tree = self._or()
        assert self.i == len(self.tokens), f"trailing tokens {self.tokens[self.i :]}"
        assert self.used == set(bind), f"bind parameters not used: {set(bind) - self.used}"

    def _peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _take(self, want: str | None = None) -> str:
        tok = self.tokens[self.i]
        assert want is None or tok == want, f"expected {want}, got {tok}"
        self.i += 1
        return tok

    def _or(self) -> Any:
        parts = [self._and()]
        while self._peek() == "OR":
            self._take()
            parts.append(self._and())
        return parts[0] if len(parts) == 1 else ("or", parts)

    def _and(self) -> Any:
        parts = [self._not()]
        while self._peek() == "AND":
            self._take()
            parts.append(self._not())
        return parts[0] if len(parts) == 1 else ("and", parts)

    def _not(self) -> Any:
        if self._peek() == "NOT":
            self._take()
            return ("not", self._not())
        return self._cmp()

    def _cmp(self) -> Any:
        left = self._operand()
        op = self._peek()
        if op in _PY_CMP or op == "IN":
            self._take()
            return (op, left, self._operand())
        return left

    def _operand(self) -> Any:
        tok = self._take()
        if tok == "(":
            inner = self._or()
            self._take(")")
            return inner
        if tok in ("true", "false"):
            return ("const", tok == "true")
        if tok.startswith("d.@"):
            self.used.add(tok[3:])
            return ("attr", self.bind[tok[3:]])
        if tok.startswith("@"):
            self.used.add(tok[1:])
            return ("const", self.bind[tok[1:]])
        raise AssertionError(f"unexpected token {tok}")

    def _eval(self, node: Any, row: dict[str, Any]) -> Any:
        kind = node[0]
        if kind == "const":
            return node[1]
        if kind == "attr":
            return row.get(node[1])
        if kind == "and":
            return all(self._eval(p, row) for p in node[1])
        if kind == "or":
            return any(self._eval(p, row) for p in node[1])
        if kind == "not":
            return not self._eval(node[1], row)
        a, b = self._eval(node[1], row), self._eval(node[2], row)
        if kind == "IN":
            return any(aql_compare(a, "==", x) for x in b)
        return aql_compare(a, kind, b)

    def mask(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        names = list(columns)
        n = len(next(iter(columns.values())))
        plain = lambda v: v.item() if isinstance(v, np.generic) else v  # noqa: E731
        rows = ({k: plain(columns[k][i]) for k in names} for i in range(n))
        return np.array([bool(self._eval(self.tree, r)) for r in rows], dtype=bool)


def test_to_aql_writes_names_and_values_as_bind_parameters():
    expr, bind = to_aql(
        F.And((F.Cmp("tags.i", "lt", np.int64(3)), F.Not(F.In("label", ("a", "b")))))
    )
    assert expr == "(d.@f0 < @v0 AND NOT (d.@f1 IN @v1))"
    assert bind == {"f0": "tags\uff0ei", "v0": 3, "f1": "label", "v1": ["a", "b"]}
    assert type(bind["v0"]) is int  # numpy scalars become JSON numbers
    expr, bind = to_aql(F.Range("score", 0.25, 0.5), var="doc")
    assert expr == "(doc.@f0 >= @v0 AND doc.@f0 <= @v1)"
    assert to_aql(F.In("x", ())) == ("false", {})
    # values take the field's kind: AQL never finds true == 1
    _, bind = to_aql(F.Cmp("flag", "eq", 1), kinds={"flag": "bool"})
    assert bind["v0"] is True
    _, bind = to_aql(F.Cmp("n", "ge", True), kinds={"n": "int"})
    assert bind["v0"] == 1 and type(bind["v0"]) is int


def _columns(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "tags.i": rng.integers(0, 50, n, dtype=np.int64),
        "score": np.round(rng.random(n), 3),
        "label": np.array([f"l{v}" for v in rng.integers(0, 5, n)], dtype=object),
        "flag": rng.random(n) < 0.3,
    }


KINDS = {"tags.i": "int", "score": "float", "label": "str", "flag": "bool"}


def _random_filter(rng: np.random.Generator, depth: int = 0) -> F.Filter:
    r = rng.random()
    if depth < 3 and r < 0.3:
        parts = tuple(_random_filter(rng, depth + 1) for _ in range(int(rng.integers(1, 4))))
        return F.And(parts) if rng.random() < 0.5 else F.Or(parts)
    if depth < 3 and r < 0.4:
        return F.Not(_random_filter(rng, depth + 1))
    field = ["tags.i", "score", "label", "flag"][int(rng.integers(0, 4))]
    if field == "label":
        values: list[Any] = [f"l{v}" for v in range(6)]
    elif field == "flag":
        values = [True, False, np.bool_(True), 0, 1]  # ints on a bool field
    elif field == "tags.i":
        values = [int(rng.integers(-5, 55)), np.int64(rng.integers(0, 50)), 7.5, True]
    else:
        values = [round(float(rng.random()), 3), np.float64(0.5), 0, 1]
    pick = lambda: values[int(rng.integers(0, len(values)))]  # noqa: E731
    kind = rng.integers(0, 4)
    if kind == 0:
        return F.Cmp(field, F.CMP_OPS[int(rng.integers(0, 6))], pick())
    if kind == 1 and field != "flag":
        lo, hi = sorted([pick(), pick()], key=lambda v: str(v) if field == "label" else float(v))
        return F.Range(field, lo, hi)
    if kind == 2:
        return F.In(field, ())
    return F.In(field, tuple(pick() for _ in range(int(rng.integers(1, 4)))))


def test_compiled_filters_select_what_the_numpy_reference_selects():
    columns = _columns(400, seed=3)
    by_attr = {key(f): col for f, col in columns.items()}
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(300):
        f = _random_filter(rng)
        want = F.evaluate(f, columns)
        expr, bind = to_aql(f, "d", KINDS)
        got = AqlExpr(expr, bind).mask(by_attr)
        np.testing.assert_array_equal(got, want, err_msg=f"{f}\n{expr}\n{bind}")
        checked += int(0 < want.sum() < len(want))  # filters that actually split
    assert checked > 100


def test_find_query_sorts_limits_and_projects(fake):
    store = StoreSpec("arangodb", fake.url).open()
    try:
        schema = Schema({"tags.i": "int", "label": "str"}, dim=4)
        coll = store.create_collection("sb_find", schema)
        q, bind = coll.find_query(F.Cmp("tags.i", "lt", 25), order=("label", True), limit=7)
        assert q == (
            "FOR d IN @@c FILTER d.@f0 < @v0 SORT d.@o DESC LIMIT @n RETURN [d._key, d.@r0, d.@r1]"
        )
        assert bind == {
            "@c": "sb_find",
            "f0": "tags\uff0ei",
            "v0": 25,
            "o": "label",
            "n": 7,
            "r0": "tags\uff0ei",
            "r1": "label",
        }
        assert coll.find_query() == (
            "FOR d IN @@c RETURN [d._key, d.@r0, d.@r1]",
            {"@c": "sb_find", "r0": "tags\uff0ei", "r1": "label"},
        )
    finally:
        store.close()


# --- the adapter's requests, against a stand-in server ----------------------------


class FakeArango:
    """A stand-in for an ArangoDB server (see the module docstring): one
    database, in-memory collections of documents by ``_key``, basic auth,
    and a log of every request as (method, path, query, headers, body)."""

    VERSION = "3.12.0-fake"

    def __init__(self, database: str = "bench", user: str = "bench", password: str = "p@ss w"):
        self.database, self.user, self.password = database, user, password
        self.collections: dict[str, dict[str, dict[str, Any]]] = {}
        self.requests: list[dict[str, Any]] = []
        self.pending: list[Callable[[], None]] = []  # async work acknowledged, not yet done
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
                parts = urlsplit(self.path)
                req = {
                    "method": self.command,
                    "path": unquote(parts.path),
                    "query": {k: v[0] for k, v in parse_qs(parts.query).items()},
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(raw) if raw else None,
                }
                with fake.lock:
                    fake.requests.append(req)
                    status, body = fake.answer(req)
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        port = self.server.server_address[1]
        self.url = f"http://{user}:{password.replace('@', '%40').replace(' ', '%20')}@127.0.0.1:{port}/{database}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- what the test looks at
    def of(self, method: str, suffix: str) -> list[dict[str, Any]]:
        """Requests with this method whose path (after /_db/<db>) is suffix."""
        prefix = f"/_db/{self.database}"
        return [r for r in self.requests if r["method"] == method and r["path"] == prefix + suffix]

    def run_pending(self) -> None:
        with self.lock:
            work, self.pending = self.pending, []
            for w in work:
                w()

    # -- the server side
    @staticmethod
    def error(status: int, num: int, message: str) -> tuple[int, dict[str, Any]]:
        return status, {"error": True, "code": status, "errorNum": num, "errorMessage": message}

    def answer(self, req: dict[str, Any]) -> tuple[int, Any]:
        expected = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        if req["headers"].get("authorization") != expected:
            return self.error(401, 11, "not authorized to execute this request")
        prefix = f"/_db/{self.database}"
        if not req["path"].startswith(prefix + "/"):
            return self.error(404, 1228, "database not found")
        path, q, body = req["path"][len(prefix) :], req["query"], req["body"]
        if req["headers"].get("x-arango-async") == "true":
            # fire and forget: acknowledged now, done later, no result kept
            if req["method"] == "POST" and (
                path.startswith("/_api/document/") or path == "/_api/import"
            ):
                self.pending.append(lambda: self.write(path, q, body))
                return 202, None
            return self.error(400, 400, "fake: async only for inserts")
        m = req["method"]
        if m == "GET" and path == "/_api/version":
            return 200, {"server": "arango", "version": self.VERSION, "license": "community"}
        if m == "GET" and path == "/_api/collection":
            names = sorted(self.collections)
            return 200, {
                "error": False,
                "code": 200,
                "result": [
                    {"id": str(i + 1), "name": n, "isSystem": False, "type": 2, "status": 3}
                    for i, n in enumerate(names)
                ],
            }
        if m == "POST" and path == "/_api/collection":
            name = body["name"]
            if name in self.collections:
                return self.error(409, 1207, "duplicate name")
            self.collections[name] = {}
            return 200, {"id": "9", "name": name, "type": 2, "status": 3, "isSystem": False}
        coll = re.fullmatch(r"/_api/collection/([^/]+)(/count)?", path)
        if coll:
            name = coll.group(1)
            if name not in self.collections:
                return self.error(404, 1203, "collection or view not found")
            if m == "GET" and coll.group(2):
                return 200, {"name": name, "count": len(self.collections[name]), "code": 200}
            if m == "DELETE" and not coll.group(2):
                del self.collections[name]
                return 200, {"id": "9", "error": False, "code": 200}
        doc = re.fullmatch(r"/_api/document/([^/]+)", path)
        if doc and doc.group(1) not in self.collections:
            return self.error(404, 1203, "collection or view not found")
        if doc and m == "PUT" and q.get("onlyget") in ("1", "true"):
            docs = self.collections[doc.group(1)]
            return 200, [docs.get(k, {"error": True, "errorNum": 1202, "code": 404}) for k in body]
        if (doc and m == "POST") or (m == "POST" and path == "/_api/import"):
            return self.write(path, q, body)
        return self.error(404, 404, f"fake: {m} {path} not implemented")

    def write(self, path: str, q: dict[str, str], body: list[dict[str, Any]]) -> tuple[int, Any]:
        name = q["collection"] if path == "/_api/import" else path.rsplit("/", 1)[1]
        docs = self.collections[name]
        out = []
        for d in body:
            k = d["_key"]
            docs[k] = {**d, "_id": f"{name}/{k}", "_rev": "_r"}
            out.append({"_id": f"{name}/{k}", "_key": k, "_rev": "_r"})
        if path == "/_api/import":
            return 201, {"created": len(body), "errors": 0, "empty": 0, "updated": 0, "ignored": 0}
        return 202, out


@pytest.fixture
def fake():
    f = FakeArango()
    yield f
    f.close()


def test_opening_connects_with_the_urls_credentials_and_database(fake):
    store = StoreSpec("arangodb", fake.url).open()
    try:
        (version,) = fake.of("GET", "/_api/version")
        assert version["headers"]["x-arango-driver"].startswith("python-arango/")
        assert store.versions()["engine"] == f"ArangoDB {FakeArango.VERSION}"
        assert store.versions()["client"].startswith("python-arango ")
        described = json.dumps(store.spec.describe())
        assert "p%40ss" not in described and "p@ss" not in described
    finally:
        store.close()
    wrong = fake.url.replace("bench:", "intruder:", 1)
    with pytest.raises(UserError, match=r"cannot use ArangoDB at http://intruder:\*\*\*@"):
        StoreSpec("arangodb", wrong).open()
    gone = FakeArango()
    gone.close()  # nothing listens on its port any more
    with pytest.raises(UserError, match="cannot use ArangoDB"):
        StoreSpec("arangodb", gone.url).open()


def _docs(n: int = 20) -> DocBatch:
    d = make_docs(n, dim=6)
    return DocBatch(d.ids - 5, d.fields, d.vectors)  # negative ids too


def test_insert_get_count_drop_requests(fake):
    fake.collections["someone_elses_data"] = {"1": {"_key": "1"}}
    store = StoreSpec("arangodb", fake.url).open()
    try:
        docs = _docs()
        with pytest.raises(ForeignDataError):
            store.create_collection("someone_elses_data", docs.schema())
        coll = store.create_collection("storebench_abcd1234_ingest", docs.schema())
        (create,) = fake.of("POST", "/_api/collection")
        assert create["body"]["name"] == "storebench_abcd1234_ingest"

        coll.insert(docs)
        (ins,) = fake.of("POST", "/_api/document/storebench_abcd1234_ingest")
        assert ins["query"]["overwriteMode"] == "replace"
        assert "x-arango-async" not in ins["headers"]
        first = ins["body"][0]
        assert set(first) == {"_key", "tags\uff0ei", "score", "label", "vec"}
        assert first["_key"] == "-5"
        assert base64.b64decode(first["vec"]) == docs.vectors[0].tobytes()
        assert [d["_key"] for d in ins["body"]] == [str(i) for i in docs.ids.tolist()]

        assert coll.count() == len(docs)
        assert len(fake.of("GET", "/_api/collection/storebench_abcd1234_ingest/count")) == 1

        want = np.array([-5, 3, 14, 999], np.int64)  # 999 does not exist
        got = coll.get(want).sorted_by_id()
        (get,) = fake.of("PUT", "/_api/document/storebench_abcd1234_ingest")
        assert get["query"]["onlyget"] == "1" and get["body"] == ["-5", "3", "14", "999"]
        ref = docs.take(np.array([0, 8, 19]))
        np.testing.assert_array_equal(got.ids, ref.ids)
        for f in ("tags.i", "score", "label"):
            assert list(got.fields[f]) == list(ref.fields[f]), f
            assert got.fields[f].dtype == ref.fields[f].dtype, f
        assert got.vectors.tobytes() == ref.vectors.tobytes(), "vectors round-trip bit-exact"

        with pytest.raises(ForeignDataError):
            store.open_collection("someone_elses_data", docs.schema()).drop()
        assert not fake.of("DELETE", "/_api/collection/someone_elses_data")
        coll.drop()
        assert len(fake.of("DELETE", "/_api/collection/storebench_abcd1234_ingest")) == 1
        assert set(fake.collections) == {"someone_elses_data"}
        assert not store.has_collection("storebench_abcd1234_ingest")
    finally:
        store.close()


@pytest.mark.parametrize("api", ["document", "import"])
def test_async_inserts_carry_the_header_and_are_acknowledged_before_the_work(fake, api):
    spec = StoreSpec("arangodb", fake.url, options={"async": True, "insert_api": api})
    store = spec.open()
    try:
        docs = _docs(30)
        coll = store.create_collection("sb_async", docs.schema())
        for b in docs.batches(10):
            coll.insert(b)
        path = "/_api/document/sb_async" if api == "document" else "/_api/import"
        inserts = fake.of("POST", path)
        assert len(inserts) == 3
        assert all(r["headers"].get("x-arango-async") == "true" for r in inserts)
        if api == "import":
            assert all(
                r["query"]
                == {
                    "type": "array",
                    "collection": "sb_async",
                    "complete": "1",
                    "details": "0",
                    "onDuplicate": "replace",
                }
                for r in inserts
            )
        # acknowledged, not done: the engine counts nothing yet
        assert coll.count() == 0
        fake.run_pending()
        assert coll.count() == 30
        # only inserts go asynchronously
        others = [r for r in fake.requests if r not in inserts]
        assert others and all("x-arango-async" not in r["headers"] for r in others)
        got = coll.get(docs.ids)
        assert sorted(got.ids.tolist()) == sorted(docs.ids.tolist())
        coll.drop()
    finally:
        store.close()


def test_import_reports_failed_documents(fake):
    store = StoreSpec("arangodb", fake.url, options={"insert_api": "import"}).open()
    try:
        docs = _docs(5)
        coll = store.create_collection("sb_import", docs.schema())
        coll.insert(docs)
        (imp,) = fake.of("POST", "/_api/import")
        assert imp["query"]["collection"] == "sb_import" and len(imp["body"]) == 5
        assert coll.count() == 5
        original = fake.write
        fake.write = lambda path, q, body: (  # type: ignore[method-assign]
            201,
            {"created": 3, "errors": 2, "empty": 0, "updated": 0, "ignored": 0},
        )
        with pytest.raises(UserError, match="2 of 5 documents failed"):
            coll.insert(docs)
        fake.write = original  # type: ignore[method-assign]
        coll.drop()
    finally:
        store.close()


def test_threads_use_their_own_clients(fake):
    store = StoreSpec("arangodb", fake.url).open()
    try:
        docs = _docs(40)
        coll = store.create_collection("sb_threads", docs.schema())
        threads = [threading.Thread(target=coll.insert, args=(b,)) for b in docs.batches(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert coll.count() == 40
        assert len(store._clients) == 5  # the opening thread's and one per client thread
        coll.drop()
    finally:
        store.close()
    assert store._clients == []


@pytest.mark.parametrize(
    "options, message",
    [
        ({"async": "yes"}, "option async of arangodb: Input should be a valid boolean"),
        ({"insert_api": "bulk"}, "option insert_api of arangodb: Input should be 'document'"),
        (
            {"request_timeout": "1m"},
            "option request_timeout of arangodb: Input should be a valid number",
        ),
        ({"asynch": True}, "unknown option parameter 'asynch'"),
    ],
)
def test_bad_options_are_user_errors(fake, options, message):
    with pytest.raises(UserError, match=message):
        StoreSpec("arangodb", fake.url, options=options).open()


def test_reserved_field_names_and_collection_names(fake):
    store = StoreSpec("arangodb", fake.url).open()
    try:
        for field in ("_key", "_from", "vec"):
            with pytest.raises(UserError, match="reserved by the arangodb store"):
                store.create_collection("sb_reserved", Schema({field: "int"}))
        with pytest.raises(UserError, match="not an ArangoDB name"):
            store.create_collection("9lives", Schema({"a": "int"}))
        assert not fake.of("POST", "/_api/collection")
    finally:
        store.close()
