"""The agdb store: the agdb graph database server, through its HTTP JSON API
(``servers/agdb.py`` has the client; no Python client exists upstream).

Graph model (the shape of agdb's own social benchmark):

- The collections of one run share one agdb database (``storebench_<run>``:
  the collection name without its last ``_part``; the ``db`` option names
  it instead), so references between them can be edges.
- A collection is a root node aliased with the collection's name, with a
  blank edge to each of its documents.
- A document is a node: its id under the key ``id@<root>`` (an agdb index on
  that key finds a document by id), each scalar field under its own name
  (int and bool as I64, float as F64, str as String), the vector (if any)
  as a VecF64 under ``_vector`` (kept for get; agdb has no vector search).
- A reference field (``Schema.refs``) is also an edge from the document to
  the document it references, carrying ``{field: 1}`` (like agdb's
  ``authored`` / ``commented`` edges); the field stays a node property too, so
  reads return it. The referenced document must exist (checked in the same
  transaction: a dangling reference fails the insert and writes nothing).

Operations, each one HTTP request (agdb chains queries; ``exec_mut`` runs
them in one write transaction, ``exec`` in one read transaction):

- insert: the nodes with their values (one InsertNodes), the root's edges to
  them, and per reference field the edges to the referenced nodes (found by
  the index). Large batches are split into requests under the server's body
  limit.
- get / update / delete: per id, an index search on ``id@<root>``; ids that
  do not exist are left out of get, ignored by delete.
- find: a breadth-first search from the root (distance 2 = the documents)
  with the filter compiled to agdb conditions (comparisons on key values,
  nested ``Where`` groups, ``Not`` modifiers; ``in`` on numbers is agdb's
  ``Any``, on strings an ``Or`` of equalities): nothing is post-filtered in
  Python. A filter that pins a reference field (``post == X``, alone or in
  an ``and``) searches from the referenced node instead, backwards along the
  reference edges (what agdb's benchmark does for "comments of a post"):
  its cost follows that node's edges, not the collection's size. ``order``
  is agdb's server-side ``order_by`` (the search collects every match, sorts,
  then applies the limit), not a traversal-order shortcut.
- count: the root's outgoing edge count. size_bytes: the database's size
  as the server reports it (``/db/list``): the whole database, shared by
  the run's collections. compact: the server's ``optimize`` (with
  ``shrink_to_fit`` when that option is set).

agdb compares values type-strictly (an I64 is never equal to an F64), so
filter values are converted to the field's kind first (a non-integral bound
on an int field becomes the equivalent integral one).

Options: ``db_type`` (``mapped``: memory-mapped file, agdb's default;
``file``: file only; ``memory``: in memory, no persistence), ``db``,
``shrink_to_fit``, and for a managed server ``log_level`` (default
``warn``) and ``sync_mode`` (``none``, agdb's default, or ``commit``).

Without a URL it runs on a managed server (``managed_server``, started and
stopped by ``stores.opening``); with
``http://user:password@host:port`` it logs in as that user (``AGDB_PASSWORD``
fills in a password the URL leaves out) and creates databases owned by that
user. It deletes only databases it created, once its last collection there
is dropped.

One piece: the graph model (root nodes, id indexes, reference edges), its
query builders and its result decoding must change together; the transport
(HTTP or the embedded extension) is the only part that varies.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal
from urllib.parse import SplitResult, unquote, urlsplit

import numpy as np
from pydantic import StrictBool

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import And, Cmp, Filter, In, Not, Or, Range
from storebench.errors import StorebenchError, UserError
from storebench.servers.agdb import AgdbApi, AgdbError, DbElement, Query, QueryResult
from storebench.stores.base import (
    DOCUMENTS,
    Capability,
    Collection,
    RamUse,
    Store,
    StoreSpec,
    redact_url,
)
from storebench.stores.columns import batch_from_records, plain
from storebench.stores.config import StoreOptions, UrlForm
from storebench.stores.params import IndexParams, Order

VECTOR = "_vector"
EDGE_VALUE = 1  # the value of the {field: 1} property on a reference edge
MAX_BODY = 8 << 20  # bytes per request: under agdb's default 10 MiB body limit
_MISSING_REF = "No element found in the result"  # agdb: a chained query found nothing
_ALWAYS: dict[str, Any] = {"Where": []}  # an empty group is true
_NEVER: dict[str, Any] = {"Ids": []}  # "id in []" is false


class DanglingReference(StorebenchError):
    """An insert or update referenced a document that does not exist."""


# --- JSON shapes of agdb queries -----------------------------------------------


def _s(text: str) -> dict[str, Any]:
    return {"String": text}


def _kv(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": _s(key), "value": value}


def _id(db_id: int) -> dict[str, Any]:
    return {"Id": db_id}


def _ref(index: int) -> dict[str, Any]:
    """The result of query ``index`` of the same request (agdb's ``:N`` alias)."""
    return {"Alias": f":{index}"}


def _cond(data: Any, logic: str = "And", modifier: str = "None") -> dict[str, Any]:
    return {"logic": logic, "modifier": modifier, "data": data}


def _distance(op: str, n: int) -> dict[str, Any]:
    return _cond({"Distance": {op: n}})


def _search(
    origin: dict[str, Any] | None = None,
    destination: dict[str, Any] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    order_by: list[dict[str, Any]] | None = None,
    limit: int = 0,
    algorithm: str = "BreadthFirst",
) -> dict[str, Any]:
    return {
        "algorithm": algorithm,
        "origin": origin or _id(0),
        "destination": destination or _id(0),
        "limit": limit,
        "offset": 0,
        "order_by": order_by or [],
        "conditions": conditions or [],
        "reverse": False,
    }


def _by_id(key: str, doc_id: int) -> dict[str, Any]:
    """The node whose ``key`` is ``doc_id``, through agdb's index on ``key``."""
    return _search(
        algorithm="Index",
        conditions=[_cond({"KeyValue": {"key": _s(key), "value": {"Equal": {"I64": doc_id}}}})],
    )


def _exists(index: int) -> Query:
    """Fails the whole request when query ``index`` found nothing."""
    return {"Search": _search(origin=_ref(index), conditions=[_distance("Equal", 0)], limit=1)}


def _value(kind: str, v: Any) -> dict[str, Any]:
    if kind == "int":
        return {"I64": int(v)}
    if kind == "float":
        return {"F64": float(v)}
    if kind == "bool":
        return {"I64": 1 if v else 0}
    return {"String": str(v)}


def _plain(v: dict[str, Any]) -> Any:
    return next(iter(v.values()))


# --- filters -------------------------------------------------------------------

_OPS = {
    "eq": "Equal",
    "ne": "NotEqual",
    "lt": "LessThan",
    "le": "LessThanOrEqual",
    "gt": "GreaterThan",
    "ge": "GreaterThanOrEqual",
}


def _cmp_data(field: str, op: str, value: Any, kind: str) -> dict[str, Any]:
    """One comparison as condition data, the value in the field's type."""
    v = plain(value)
    target: dict[str, Any]
    if kind in ("int", "bool"):
        if isinstance(v, str):
            raise UserError(f"agdb: field {field!r} holds numbers, not {v!r}", where="filter")
        f = float(v)
        if math.isinf(f):  # every int is below +inf and above -inf
            if op in ("eq", "ne"):
                return _NEVER if op == "eq" else _ALWAYS
            holds = op in ("lt", "le") if f > 0 else op in ("gt", "ge")
            return _ALWAYS if holds else _NEVER
        if kind == "bool" or f.is_integer():
            target = {"I64": int(bool(v)) if kind == "bool" else int(f)}
        else:  # a non-integral bound on an int field: the equivalent integral one
            if op == "eq":
                return _NEVER
            if op == "ne":
                return _ALWAYS
            op, target = {
                "lt": ("le", {"I64": math.floor(f)}),
                "le": ("le", {"I64": math.floor(f)}),
                "gt": ("ge", {"I64": math.ceil(f)}),
                "ge": ("ge", {"I64": math.ceil(f)}),
            }[op]
    elif kind == "float":
        if isinstance(v, str):
            raise UserError(f"agdb: field {field!r} holds numbers, not {v!r}", where="filter")
        target = {"F64": float(v)}
    else:
        if not isinstance(v, str):
            if op in ("eq", "ne"):  # a string never equals a number
                return _NEVER if op == "eq" else _ALWAYS
            raise UserError(f"agdb: field {field!r} holds strings, not {v!r}", where="filter")
        target = {"String": v}
    return {"KeyValue": {"key": _s(field), "value": {_OPS[op]: target}}}


def _in_data(field: str, values: tuple[Any, ...], kind: str) -> dict[str, Any]:
    if kind == "str":
        parts = [_cmp_data(field, "eq", v, kind) for v in values]
        parts = [p for p in parts if p is not _NEVER]
        if not parts:
            return _NEVER
        # agdb's Any on strings is a substring test: an Or of equalities instead
        return {"Where": [_cond(p, "And" if i == 0 else "Or") for i, p in enumerate(parts)]}
    nums = [float(plain(v)) for v in values if not isinstance(plain(v), str)]
    if kind == "float":
        vec: dict[str, Any] = {"VecF64": nums}
    else:
        ints = [int(x) for x in nums if x.is_integer()]
        if kind == "bool":
            ints = [1 if x else 0 for x in nums]
        vec = {"VecI64": ints}
    if not next(iter(vec.values())):
        return _NEVER
    return {"KeyValue": {"key": _s(field), "value": {"Any": vec}}}


def compile_filter(f: Filter, kinds: Mapping[str, str]) -> dict[str, Any]:
    """A storebench filter as one agdb query condition (a ``Where`` group
    for and/or, the ``Not`` modifier for not)."""

    def kind_of(field: str) -> str:
        if field not in kinds:
            raise UserError(f"agdb: unknown field {field!r} in filter", where="filter")
        return kinds[field]

    def go(node: Filter) -> tuple[dict[str, Any] | str, str]:  # (data, modifier)
        if isinstance(node, Cmp):
            return _cmp_data(node.field, node.op, node.value, kind_of(node.field)), "None"
        if isinstance(node, Range):
            k = kind_of(node.field)
            lo = _cmp_data(node.field, "ge", node.lo, k)
            hi = _cmp_data(node.field, "le", node.hi, k)
            return {"Where": [_cond(lo), _cond(hi)]}, "None"
        if isinstance(node, In):
            return _in_data(node.field, node.values, kind_of(node.field)), "None"
        if isinstance(node, And | Or):
            glue = "And" if isinstance(node, And) else "Or"
            conds = []
            for i, p in enumerate(node.parts):
                data, mod = go(p)
                conds.append(_cond(data, "And" if i == 0 else glue, mod))
            return {"Where": conds}, "None"
        if isinstance(node, Not):
            data, mod = go(node.part)
            return data, "None" if mod == "Not" else "Not"
        raise TypeError(f"not a filter: {node!r}")

    data, mod = go(f)
    return _cond(data, "And", mod)


def _pinned_ref(f: Filter | None, refs: Iterable[str]) -> tuple[str, int] | None:
    """(field, id) when the filter requires ``ref_field == id``."""
    if f is None:
        return None
    refs = set(refs)
    parts = f.parts if isinstance(f, And) else (f,)
    for p in parts:
        if isinstance(p, Cmp) and p.op == "eq" and p.field in refs:
            v = plain(p.value)
            if isinstance(v, int | float) and float(v).is_integer():
                return p.field, int(v)
    return None


# --- collection ----------------------------------------------------------------


class AgdbCollection(Collection):
    store: AgdbStore

    def __init__(self, store: AgdbStore, name: str, schema: Schema, db: str, root: int):
        super().__init__(store, name, schema)
        self.db = db
        self.root = root
        self.idkey = f"id@{root}"
        self._kinds = dict(schema.fields)
        self._fields = list(schema.fields)
        self._refs = dict(schema.refs)
        self._vec = schema.dim is not None
        self._keys = [_s(f) for f in self._fields] + [_s(self.idkey)]
        self._keys_vec = self._keys + ([_s(VECTOR)] if self._vec else [])
        # bytes per document in a request, for splitting large batches
        self._doc_bytes = 64 * (len(self._fields) + 1) + (24 * (schema.dim or 0))

    # --- requests --------------------------------------------------------------
    def _exec(self, queries: list[Query]) -> list[QueryResult]:
        return self.store.api.exec(self.store.owner, self.db, queries)

    def _exec_mut(self, queries: list[Query]) -> list[QueryResult]:
        try:
            return self.store.api.exec_mut(self.store.owner, self.db, queries)
        except AgdbError as exc:
            if _MISSING_REF in exc.message:
                raise DanglingReference(
                    f"agdb: {self.name}: a reference ({', '.join(self._refs)}) names a "
                    "document that does not exist; nothing was written"
                ) from exc
            raise

    def _chunks(self, n: int, per_doc: int) -> Iterable[tuple[int, int]]:
        step = max(1, MAX_BODY // max(per_doc, 1))
        for start in range(0, n, step):
            yield start, min(n, start + step)

    def _target_key(self, field: str) -> str:
        return self.store._idkey_of(self._refs[field], self.db)

    # --- contract ------------------------------------------------------------
    def insert(self, docs: DocBatch) -> None:
        n = len(docs)
        if not n:
            return
        ids = docs.ids.tolist()
        cols = [
            (f, self._kinds[f], docs.fields[f].tolist()) for f in self._fields if f in docs.fields
        ]
        vecs = None if docs.vectors is None else docs.vectors.astype(np.float64).tolist()
        values = []
        for j in range(n):
            row = [_kv(self.idkey, {"I64": ids[j]})]
            row += [_kv(f, _value(kind, col[j])) for f, kind, col in cols]
            if vecs is not None:
                row.append(_kv(VECTOR, {"VecF64": vecs[j]}))
            values.append(row)
        refs = {f: docs.fields[f].tolist() for f in self._refs if f in docs.fields}
        per_doc = self._doc_bytes + 250 * len(refs)
        for start, stop in self._chunks(n, per_doc):
            self._exec_mut(self._insert_queries(values[start:stop], refs, start, stop))

    def _insert_queries(
        self, values: list[list[dict[str, Any]]], refs: dict[str, list[Any]], start: int, stop: int
    ) -> list[Query]:
        qs: list[Query] = []
        found: dict[tuple[str, int], int] = {}  # (target id key, id) -> query index
        for field, targets in refs.items():
            key = self._target_key(field)
            for x in targets[start:stop]:
                if (key, int(x)) not in found:
                    found[key, int(x)] = len(qs)
                    qs.append({"Search": _by_id(key, int(x))})
                    qs.append(_exists(len(qs) - 1))  # before any edge goes in
        nodes = len(qs)
        qs.append(
            {
                "InsertNodes": {
                    "count": len(values),
                    "values": {"Multi": values},
                    "aliases": [],
                    "ids": {"Ids": []},
                }
            }
        )
        qs.append(_edges([_id(self.root)], [_ref(nodes)], []))
        for field, targets in refs.items():
            key = self._target_key(field)
            to = [_ref(found[key, int(x)]) for x in targets[start:stop]]
            # pairwise: document j -> its referenced document (all exist, so
            # both lists have the same length)
            qs.append(_edges([_ref(nodes)], to, [_kv(field, {"I64": EDGE_VALUE})]))
        return qs

    def get(self, ids: np.ndarray) -> DocBatch:
        elements: list[DbElement] = []
        id_list = ids.tolist()
        for start, stop in self._chunks(len(id_list), 400):
            qs: list[Query] = [
                {"SelectValues": {"keys": self._keys_vec, "ids": {"Search": _by_id(self.idkey, i)}}}
                for i in id_list[start:stop]
            ]
            for r in self._exec(qs):
                elements.extend(r["elements"])
        return self._decode(elements, vectors=True)

    def update(self, docs: DocBatch) -> None:
        n = len(docs)
        if not n:
            return
        ids = docs.ids.tolist()
        cols = [(f, self._kinds[f], docs.fields[f].tolist()) for f in docs.fields]
        vecs = None if docs.vectors is None else docs.vectors.astype(np.float64).tolist()
        refs = [f for f in docs.fields if f in self._refs]
        per_doc = self._doc_bytes + 600 * len(refs)
        for start, stop in self._chunks(n, per_doc):
            qs: list[Query] = []
            for j in range(start, stop):
                row = [_kv(f, _value(kind, col[j])) for f, kind, col in cols]
                if vecs is not None:
                    row.append(_kv(VECTOR, {"VecF64": vecs[j]}))
                if row:
                    qs.append(
                        {
                            "InsertValues": {
                                "ids": {"Search": _by_id(self.idkey, ids[j])},
                                "values": {"Single": row},
                            }
                        }
                    )
                for f in refs:  # move the reference edge
                    x = int(docs.fields[f][j])
                    doc = len(qs)
                    qs.append({"Search": _by_id(self.idkey, ids[j])})
                    qs.append(_exists(doc))
                    old = _search(
                        origin=_ref(doc),
                        conditions=[_distance("Equal", 1), _cond({"Keys": [_s(f)]})],
                    )
                    qs.append({"Remove": {"Search": old}})
                    target = len(qs)
                    qs.append({"Search": _by_id(self._target_key(f), x)})
                    qs.append(_exists(target))
                    qs.append(_edges([_ref(doc)], [_ref(target)], [_kv(f, {"I64": EDGE_VALUE})]))
            if qs:
                self._exec_mut(qs)

    def delete(self, ids: np.ndarray) -> None:
        id_list = ids.tolist()
        for start, stop in self._chunks(len(id_list), 400):
            qs: list[Query] = [
                {"Remove": {"Search": _by_id(self.idkey, i)}} for i in id_list[start:stop]
            ]
            if qs:
                self._exec_mut(qs)

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        if limit is not None and limit <= 0:  # agdb reads limit 0 as "no limit"
            return self._decode([], vectors=False)
        conds = [] if where is None else [compile_filter(where, self._kinds)]
        order_by = []
        if order is not None:
            field, desc = order
            if field not in self._kinds:
                raise UserError(f"agdb: unknown order field {field!r}", where="find")
            order_by = [{"Desc" if desc else "Asc": _s(field)}]
        pinned = _pinned_ref(where, self._refs)
        if pinned is None:
            search = _search(
                origin=_id(self.root),
                conditions=[_distance("Equal", 2), *conds],
                order_by=order_by,
                limit=limit or 0,
            )
            (res,) = self._exec([{"SelectValues": {"keys": self._keys, "ids": {"Search": search}}}])
            return self._decode(res["elements"], vectors=False)
        field, target = pinned
        # backwards from the referenced document along the reference edges
        search = _search(
            destination=_ref(0),
            conditions=[_distance("Equal", 2), _cond({"Keys": [_s(self.idkey)]}), *conds],
            order_by=order_by,
            limit=limit or 0,
        )
        try:
            _found, res = self._exec(
                [
                    {"Search": _by_id(self._target_key(field), target)},
                    {"SelectValues": {"keys": self._keys, "ids": {"Search": search}}},
                ]
            )
        except AgdbError as exc:
            if _MISSING_REF in exc.message:  # the referenced document does not exist
                return self._decode([], vectors=False)
            raise
        return self._decode(res["elements"], vectors=False)

    def _decode(self, elements: list[DbElement], vectors: bool) -> DocBatch:
        docs = [
            {kv["key"]["String"]: _plain(kv["value"]) for kv in el["values"]} for el in elements
        ]
        vecs = [d[VECTOR] for d in docs] if vectors and self._vec else None
        ids = [d[self.idkey] for d in docs]
        return batch_from_records(self.schema, ids, docs, lambda d, f: d[f], vecs)

    def count(self) -> int:
        (res,) = self._exec(
            [{"SelectEdgeCount": {"ids": {"Ids": [_id(self.root)]}, "from": True, "to": False}}]
        )
        return int(res["result"])

    def size_bytes(self) -> int:
        """The database's size as the server reports it: the whole database,
        which the run's collections share."""
        return self.store._db_size(self.db)

    def compact(self) -> None:
        """agdb's optimize on the database (defragments; with the
        ``shrink_to_fit`` option it also gives the free space back)."""
        self.store.api.optimize(self.store.owner, self.db, self.store.options.shrink_to_fit)

    def _drop(self) -> None:
        self.store.api.exec_mut(
            self.store.owner,
            self.db,
            [
                {"RemoveIndex": _s(self.idkey)},
                {
                    "Remove": {
                        "Search": _search(
                            origin=_id(self.root),
                            conditions=[_distance("LessThanOrEqual", 2), _cond("Node")],
                        )
                    }
                },
            ],
        )
        self.store._forget(self.name, self.db)


def _edges(
    frm: list[dict[str, Any]], to: list[dict[str, Any]], values: list[dict[str, Any]]
) -> Query:
    return {
        "InsertEdges": {
            "from": {"Ids": frm},
            "to": {"Ids": to},
            "ids": {"Ids": []},
            "values": {"Single": values},
            "each": False,
        }
    }


# --- store -------------------------------------------------------------------------


def _login(url: str, parts: SplitResult | None) -> SplitResult | None:
    """A user to log in as, and a password (or ``AGDB_PASSWORD``)."""
    if parts is not None and not parts.username:
        raise ValueError("no user")
    if parts is not None and not parts.password and not os.environ.get("AGDB_PASSWORD"):
        raise ValueError("no password (nor AGDB_PASSWORD)")
    return parts


class AgdbStore(Store):
    engine = "agdb"
    server = "agdb:AgdbServer"
    capabilities = DOCUMENTS | {
        Capability.ORDER,
        Capability.SIZE,
        Capability.COMPACT,
        Capability.SHARED_ACROSS_PROCESSES,
    }
    extra = None  # the client is the standard library (http.client, json)
    url_form = UrlForm("http://user:password@host:port[/basepath]", schemes=("http",), parse=_login)
    # the managed agdb keeps its database in memory; vectors as f64
    ram = RamUse(vector=8, fields=2, overhead=256, fixed_mib=32)
    handles = ("api",)

    class Options(StoreOptions):
        managed_only = ("log_level", "sync_mode")
        db_type: Literal["mapped", "file", "memory"] = "mapped"
        db: str | None = None
        shrink_to_fit: StrictBool = False
        log_level: Literal["off", "error", "warn", "info", "debug", "trace"] = "warn"
        sync_mode: Literal["none", "commit"] | None = None

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self._created_dbs: set[str] = set()
        self._roots: dict[tuple[str, str], int] = {}  # (db, collection) -> root node id
        self.api = self._open_transport()

    def _open_transport(self) -> AgdbApi:
        """What carries the queries (the seam: the embedded store runs the
        same queries in its own process instead): here the server's HTTP API."""
        url = self.spec.url or ""
        parts = urlsplit(url)  # a user and a password, or AGDB_PASSWORD (``_login``)
        user = unquote(parts.username or "")
        password = unquote(parts.password or "") or os.environ.get("AGDB_PASSWORD", "")
        base = f"http://{parts.hostname}:{parts.port or 3000}{parts.path}"
        try:
            api = AgdbApi(base, user, password)
        except (OSError, AgdbError) as exc:
            raise UserError(
                f"cannot log in to agdb at {redact_url(url)}: {exc}", where="store agdb"
            ) from exc
        self.owner = user
        return api

    # --- databases ------------------------------------------------------------------
    def db_for(self, name: str) -> str:
        """The agdb database of a collection: the ``db`` option, else the name
        without its last ``_part`` (a run's collections share their prefix)."""
        if self.options.db:
            return str(self.options.db)
        return name.rsplit("_", 1)[0] if "_" in name.strip("_") else name

    def size_unit(self, coll: Collection) -> object:
        """A collection's size is its whole database's, shared by the
        collections of that database: count each database once."""
        return self.db_for(coll.name)

    def _dbs(self) -> dict[str, dict[str, Any]]:
        return {d["db"]: dict(d) for d in self.api.db_list() if d["owner"] == self.owner}

    def _db_size(self, db: str) -> int:
        info = self._dbs().get(db)
        if info is None:
            raise StorebenchError(f"agdb: database {self.owner}/{db} is gone")
        return int(info["size"])

    def _ensure_db(self, db: str) -> None:
        info = self._dbs().get(db)
        if info is None:
            self.api.db_add(self.owner, db, self.options.db_type)
            self._created_dbs.add(db)
        elif info["db_type"] != self.options.db_type:
            raise UserError(
                f"agdb database {self.owner}/{db} exists with db_type {info['db_type']}, "
                f"not {self.options.db_type}: choose another collection prefix or the db option",
                where="store agdb",
            )

    def _aliases(self, db: str) -> set[str]:
        (res,) = self.api.exec(self.owner, db, [{"SelectAllAliases": {}}])
        return {
            kv["value"]["String"]
            for el in res["elements"]
            for kv in el["values"]
            if kv["key"] == {"String": "alias"}
        }

    def _root_of(self, name: str, db: str) -> int:
        cached = self._roots.get((db, name))
        if cached is not None:
            return cached
        try:
            (res,) = self.api.exec(
                self.owner,
                db,
                [{"Search": _search(origin={"Alias": name}, conditions=[_distance("Equal", 0)])}],
            )
        except AgdbError as exc:
            raise UserError(
                f"no collection {name!r} in agdb database {self.owner}/{db} ({exc.message})",
                where="store agdb",
            ) from exc
        root = int(res["elements"][0]["id"])
        self._roots[db, name] = root
        return root

    def _idkey_of(self, name: str, db: str) -> str:
        return f"id@{self._root_of(name, db)}"

    def _forget(self, name: str, db: str) -> None:
        self._roots.pop((db, name), None)
        if db in self._created_dbs and not self._aliases(db):
            self.api.db_delete(self.owner, db)  # the database this store made, now empty
            self._created_dbs.discard(db)

    # --- collections -----------------------------------------------------------------
    def has_collection(self, name: str) -> bool:
        db = self.db_for(name)
        return db in self._dbs() and name in self._aliases(db)

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        db = self.db_for(name)
        for field, target in schema.refs.items():
            if self.db_for(target) != db:
                raise UserError(
                    f"agdb: reference {field!r} of {name!r} names {target!r}, which would live "
                    f"in another database ({self.db_for(target)} vs {db}): references are edges "
                    "and edges stay inside one database",
                    where="store agdb",
                )
        self._ensure_db(db)
        (res,) = self.api.exec_mut(
            self.owner,
            db,
            [
                {
                    "InsertNodes": {
                        "count": 1,
                        "values": {"Single": []},
                        "aliases": [name],
                        "ids": {"Ids": []},
                    }
                }
            ],
        )
        root = int(res["elements"][0]["id"])
        self._roots[db, name] = root
        self.api.exec_mut(self.owner, db, [{"InsertIndex": _s(f"id@{root}")}])
        return AgdbCollection(self, name, schema, db, root)

    def _open(self, name: str, schema: Schema) -> Collection:
        db = self.db_for(name)
        return AgdbCollection(self, name, schema, db, self._root_of(name, db))

    def versions(self) -> dict[str, str]:
        return {
            "engine": f"agdb_server {self.api.version()}",
            "client": "storebench agdb HTTP JSON client (http.client)",
        }
