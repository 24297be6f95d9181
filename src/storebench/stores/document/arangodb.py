"""The ArangoDB store: document collections in an ArangoDB server, through
the official Python client (``python-arango``).

By URL only. ArangoDB publishes no server package on the registries this
project installs from, so storebench cannot start one: the store needs
``http(s)://user:password@host:8529/database`` (``url_form``, required; a spec without
a URL is refused before a run starts). Credentials the URL leaves out come
from ``STOREBENCH_ARANGODB_USERNAME`` / ``STOREBENCH_ARANGODB_PASSWORD``
(default ``root`` and empty); no path means the ``_system`` database, no port
means 8529. Records show the URL with its password replaced.

A collection is one ArangoDB document collection, one document per id:
``_key`` is the id as a decimal string, each field under its name (a dot
becomes U+FF0E: ArangoDB reads a dot in an index's field list as a path into
a sub-document), the vector, when the schema has one, as base64 of its
float32 bytes under ``vec`` (stored and returned bit-exact; no search).
Reference fields are plain int fields. Each field in ``Schema.indexed`` gets
a persistent index. Names starting with ``_`` (ArangoDB's system attributes)
and ``vec`` are refused as field names.

Writes: ``insert`` is one ``POST /_api/document/<collection>`` per batch
(``insert_many`` with ``overwriteMode=replace``: an existing id is replaced,
as in every store), or with option ``insert_api: import`` one ``POST
/_api/import`` (``import_bulk``, ``onDuplicate=replace``, ``complete``: any
error fails the whole request). ``update`` is one ``PATCH`` and ``delete``
one ``DELETE`` per batch of up to 10,000 ids; ids that do not exist are
skipped. Option ``async: true`` sends inserts with ArangoDB's asynchronous
execution (header ``x-arango-async: true``, python-arango's
``begin_async_execution(return_result=False)``): the server answers 202 once
it has queued the request and does the work afterwards, so the latency is the
acknowledgement's, as arangob's ``--async`` measured. The server keeps no
result of such a request: an insert that fails later is not seen, and a
``count`` right after the inserts counts what the server has applied so far
(a workload that needs every document must wait for the count to reach it,
as the ingest workload's settle step does).

Reads: ``get`` is ``PUT /_api/document/<collection>?onlyget=true`` per
10,000 ids. ``find`` is one AQL query: filters compile with ``to_aql``
(attribute names and values as bind parameters), ``order`` is ``SORT``,
``limit`` is ``LIMIT``; rows come back as arrays. AQL compares strings with
the server's ICU collation (its ``--default-language``), not by code point as
the numpy reference does: ordered comparisons and ``SORT`` on string fields
can differ from the reference outside plain equal-case ASCII letters and
digits. A bool field's filter value is made a bool (AQL never finds
``true == 1``), an int or float field's a number.

``size_bytes`` is the collection's figures (``documentsSize`` plus the
indexes' ``size``: RocksDB's estimates). ``compact`` is the collection's
``compact`` (RocksDB compaction of its key range). ``drop`` deletes only a
collection this store created. Each client thread has its own client (one
HTTP session, no retries: a failed request is an error, not a hidden second
try); processes reach the same server by the same URL. Options:
``async`` (false), ``insert_api`` (``document`` or ``import``),
``request_timeout`` (seconds, 60).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Literal
from urllib.parse import SplitResult, unquote

import numpy as np
import requests
from arango import ArangoClient
from arango.exceptions import ArangoError, ArangoServerError
from arango.http import DefaultHTTPClient
from pydantic import Field, PositiveFloat, StrictBool

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Cmp, Filter, In, Range, boolean_text
from storebench.errors import UserError
from storebench.stores.base import DOCUMENTS, Capability, Collection, Store, StoreSpec, redact_url
from storebench.stores.columns import batch_from_records, batch_from_rows
from storebench.stores.config import StoreOptions, UrlForm
from storebench.stores.params import IndexParams, Order

URL_FORM = "http://user:pass@host:8529/dbname"


def _target(url: str, parts: SplitResult | None) -> dict[str, Any]:
    """Where to connect and as whom: the database is the path (none:
    ``_system``), the port 8529 if none is given."""
    if parts is None:  # not reached: the form takes URLs only
        raise ValueError("not a URL")
    database = unquote(parts.path.strip("/")) or "_system"
    if "/" in database:
        raise ValueError(f"the path is the database name, got {database!r}")
    host = parts.netloc.rpartition("@")[2]
    if parts.port is None:
        host += ":8529"
    user = parts.username
    password = parts.password
    return {
        "host": f"{parts.scheme}://{host}",
        "database": database,
        "username": unquote(user)
        if user is not None
        else os.environ.get("STOREBENCH_ARANGODB_USERNAME", "root"),
        "password": unquote(password)
        if password is not None
        else os.environ.get("STOREBENCH_ARANGODB_PASSWORD", ""),
    }


VEC = "vec"
_AQL_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_MAX_IDS = 10_000  # ids per get / update / delete request
_CURSOR_BATCH = 10_000  # rows per cursor batch of a find
_NOT_FOUND = 1202  # ERROR_ARANGO_DOCUMENT_NOT_FOUND
# ArangoDB's traditional collection names (storebench's names fit them)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,255}")


def key(field: str) -> str:
    """The attribute name of a field (a dot in an index's fields is a path)."""
    return field.replace(".", "\uff0e")


def _value(value: Any, kind: str | None) -> Any:
    """A filter value as JSON for a field of this kind (numpy scalars to
    Python; bools for bool fields, numbers for numeric ones)."""
    if isinstance(value, np.generic):
        value = value.item()
    if kind == "bool" and isinstance(value, int | float):
        return bool(value)
    if kind in ("int", "float") and isinstance(value, bool):
        return int(value)
    return value


def to_aql(
    f: Filter, var: str = "d", kinds: Mapping[str, str] | None = None
) -> tuple[str, dict[str, Any]]:
    """Compile to an AQL boolean expression over document variable ``var``,
    with bind parameters: ``@fN`` attribute names (``var.@f0``: a name, never
    a path), ``@vN`` values. ``kinds`` (field -> schema kind) types the
    values."""
    bind: dict[str, Any] = {}
    names: dict[str, str] = {}
    kinds = kinds or {}

    def attr(field: str) -> str:
        p = names.get(field)
        if p is None:
            p = names[field] = f"f{len(names)}"
            bind[p] = key(field)
        return f"{var}.@{p}"

    def val(value: Any) -> str:
        p = f"v{len(bind) - len(names)}"
        bind[p] = value
        return f"@{p}"

    def leaf(node: Filter) -> str:
        if isinstance(node, Cmp):
            kind = kinds.get(node.field)
            return f"{attr(node.field)} {_AQL_CMP[node.op]} {val(_value(node.value, kind))}"
        if isinstance(node, Range):
            kind = kinds.get(node.field)
            a = attr(node.field)
            lo, hi = val(_value(node.lo, kind)), val(_value(node.hi, kind))
            return f"({a} >= {lo} AND {a} <= {hi})"
        if isinstance(node, In):
            if not node.values:
                return "false"
            kind = kinds.get(node.field)
            return f"{attr(node.field)} IN {val([_value(v, kind) for v in node.values])}"
        raise TypeError(f"not a filter: {node!r}")

    return boolean_text(f, leaf), bind


def _chunks(ids: np.ndarray) -> Iterable[list[str]]:
    for start in range(0, len(ids), _MAX_IDS):
        yield [str(i) for i in ids[start : start + _MAX_IDS].tolist()]


def _raise_errors(results: Any, skip_missing: bool) -> None:
    """python-arango returns per-document errors in the result list instead
    of raising them: raise the first (except a missing id, when asked)."""
    if not isinstance(results, list):
        return
    for r in results:
        if isinstance(r, ArangoServerError):
            if skip_missing and r.error_code == _NOT_FOUND:
                continue
            raise r


class ArangoCollection(Collection):
    store: ArangoStore

    def __init__(self, store: ArangoStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        for f in schema.fields:
            if f.startswith("_") or key(f) == VEC:
                raise UserError(
                    f"field name {f!r} is reserved by the arangodb store (system attributes "
                    f"start with _; {VEC!r} holds the vector)",
                    where="store arangodb",
                )
        self._fields = list(schema.fields)
        self._keys = {f: key(f) for f in self._fields}
        self._vec = schema.dim is not None
        self._local = threading.local()
        # find's projection: [_key, field...] as arrays, not documents
        self._returns = {f"r{i}": k for i, k in enumerate(self._keys.values())}
        self._projection = "[d._key" + "".join(f", d.@{p}" for p in self._returns) + "]"

    # python-arango's collection wrappers, per thread (each thread has its
    # own client and HTTP session)
    def _c(self) -> Any:
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = self.store.db().collection(self.name)
        return c

    def _writer(self) -> Any:
        """Where inserts go: the collection, or the same through async
        execution (fire and forget: the server keeps no result)."""
        if not self.store.options.async_:
            return self._c()
        w = getattr(self._local, "w", None)
        if w is None:
            w = self._local.w = self.store.async_db().collection(self.name)
        return w

    def _docs(self, docs: DocBatch, fields: list[str]) -> list[dict[str, Any]]:
        names = ["_key", *(self._keys[f] for f in fields)]
        cols: list[Iterable[Any]] = [map(str, docs.ids.tolist())]
        cols += [docs.fields[f].tolist() for f in fields]
        if self._vec and docs.vectors is not None:
            names.append(VEC)
            vecs = np.ascontiguousarray(docs.vectors, dtype=np.float32)
            cols.append([base64.b64encode(row).decode("ascii") for row in vecs])
        return [dict(zip(names, row, strict=True)) for row in zip(*cols, strict=True)]

    def _to_batch(self, found: list[dict[str, Any]], with_vectors: bool) -> DocBatch:
        vecs = None
        if with_vectors and self._vec:
            vecs = np.frombuffer(b"".join(base64.b64decode(d[VEC]) for d in found), np.float32)
        ids = [d["_key"] for d in found]
        return batch_from_records(self.schema, ids, found, lambda d, f: d[self._keys[f]], vecs)

    def insert(self, docs: DocBatch) -> None:
        rows = self._docs(docs, self._fields)
        target = self._writer()
        if self.store.options.insert_api == "import":
            res = target.import_bulk(
                rows, halt_on_error=True, details=False, on_duplicate="replace"
            )
            if isinstance(res, dict) and res.get("errors"):
                raise UserError(
                    f"import into {self.name}: {res['errors']} of {len(rows)} documents failed",
                    where="store arangodb",
                )
        else:
            res = target.insert_many(rows, overwrite_mode="replace")
            _raise_errors(res, skip_missing=False)  # None for async inserts

    def get(self, ids: np.ndarray) -> DocBatch:
        c = self._c()
        found: list[dict[str, Any]] = []
        for keys in _chunks(ids):
            found += c.get_many(keys)
        return self._to_batch(found, with_vectors=True)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        if not fields and (docs.vectors is None or not self._vec):
            return
        rows = self._docs(docs, fields)
        c = self._c()
        for start in range(0, len(rows), _MAX_IDS):
            res = c.update_many(rows[start : start + _MAX_IDS], check_rev=False)
            _raise_errors(res, skip_missing=True)

    def delete(self, ids: np.ndarray) -> None:
        c = self._c()
        for keys in _chunks(ids):
            _raise_errors(c.delete_many(keys, check_rev=False), skip_missing=True)

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        query, bind = self.find_query(where, order, limit)
        cursor = self.store.db().aql.execute(
            query, bind_vars=bind, batch_size=_CURSOR_BATCH, count=False
        )
        # rows (key, fields...): the key is the id's text
        return batch_from_rows(self.schema, list(cursor), with_vectors=False)

    def find_query(
        self,
        where: Filter | None = None,
        order: Order = None,
        limit: int | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The AQL of a ``find`` and its bind parameters."""
        bind: dict[str, Any] = {"@c": self.name}
        query = "FOR d IN @@c"
        if where is not None:
            expr, params = to_aql(where, "d", self.schema.fields)
            query += f" FILTER {expr}"
            bind |= params
        if order is not None:
            query += f" SORT d.@o {'DESC' if order[1] else 'ASC'}"
            bind["o"] = key(order[0])
        if limit is not None:
            query += " LIMIT @n"
            bind["n"] = int(limit)
        bind |= self._returns
        return f"{query} RETURN {self._projection}", bind

    def count(self) -> int:
        return int(self._c().count())

    def size_bytes(self) -> int:
        figures = self._c().statistics()
        indexes = figures.get("indexes") or {}
        return int(figures.get("documents_size") or 0) + int(indexes.get("size") or 0)

    def compact(self) -> None:
        self._c().compact()

    def _drop(self) -> None:
        self.store.db().delete_collection(self.name, ignore_missing=True)


class ArangoStore(Store):
    engine = "arangodb"
    collection = ArangoCollection
    capabilities = DOCUMENTS | {
        Capability.ORDER,
        Capability.SIZE,
        Capability.COMPACT,
        Capability.SHARED_ACROSS_PROCESSES,
    }
    extra = "arangodb"
    client_dist = "python-arango"
    url_form = UrlForm(URL_FORM, schemes=("http", "https"), required=True, parse=_target)

    class Options(StoreOptions):
        # ArangoDB's asynchronous execution (x-arango-async): acknowledged when queued
        async_: StrictBool = Field(False, alias="async")
        insert_api: Literal["document", "import"] = "document"
        request_timeout: PositiveFloat = 60.0  # seconds

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)  # refuses a spec without a URL (url_form.required)
        self._local = threading.local()
        self._clients: list[Any] = []
        self._lock = threading.Lock()
        self.timeout = self.options.request_timeout
        self._target = self.check_url(spec.url)  # where to connect, as whom
        try:
            # fail now, not in the first timed call
            self._server_version = str(self.db().version())
        except (ArangoError, OSError, requests.RequestException) as exc:
            raise UserError(
                f"cannot use ArangoDB at {redact_url(spec.url)}: {exc}", where="store arangodb"
            ) from exc

    def db(self) -> Any:
        """This thread's database handle (its own client and HTTP session)."""
        db = getattr(self._local, "db", None)
        if db is None:
            t = self._target
            client = ArangoClient(
                hosts=t["host"],
                http_client=DefaultHTTPClient(
                    request_timeout=self.timeout,
                    retry_attempts=0,
                    pool_connections=1,
                    pool_maxsize=1,
                ),
            )
            with self._lock:
                self._clients.append(client)
            db = client.db(t["database"], username=t["username"], password=t["password"])
            self._local.db = db
        return db

    def async_db(self) -> Any:
        """This thread's database handle for fire-and-forget requests."""
        adb = getattr(self._local, "adb", None)
        if adb is None:
            adb = self._local.adb = self.db().begin_async_execution(return_result=False)
        return adb

    def has_collection(self, name: str) -> bool:
        return bool(self.db().has_collection(name))

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        if not _NAME.fullmatch(name):
            raise UserError(
                f"collection name {name!r} is not an ArangoDB name (a letter, then up to "
                "255 letters, digits, _ or -)",
                where="store arangodb",
            )
        coll = ArangoCollection(self, name, schema)
        db = self.db()
        db.create_collection(name)
        try:
            for f in schema.indexed:
                db.collection(name).add_persistent_index(fields=[key(f)])
        except BaseException:
            with contextlib.suppress(Exception):  # it is ours: created just now
                db.delete_collection(name, ignore_missing=True)
            raise
        return coll

    def engine_version(self) -> str:
        return f"ArangoDB {self._server_version}"

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for c in clients:
            with contextlib.suppress(Exception):
                c.close()
        self._local = threading.local()
        super().close()
