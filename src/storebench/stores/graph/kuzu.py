"""The Kuzu store: an embedded graph database (Cypher), through the ``kuzu``
package.

A collection is a node table ``(id INT64 PRIMARY KEY, <fields>, vec
FLOAT[dim])``; each reference field of the schema (``Schema.refs``) is not a
property but a REL table ``<collection>__<field>`` (FROM the collection TO
the referenced one): a document holds one edge per reference field, and
reading the field returns the id at the edge's end (-1 when there is none,
e.g. after the referenced document was deleted: ``DETACH DELETE`` takes its
edges with it). The vector, when the schema has one, is only stored and
returned (Kuzu's vector index is an extension this store does not use): the
store declares no search.

Writes are one statement per batch over list parameters, one list per
column (``UNWIND range(1, $n) AS i MATCH <referenced nodes> MERGE (n:T {id:
$k[i]}) SET ... CREATE <edges>``; no map per document), after one that
removes the old edges of the references being written, in one transaction:
an insert replaces an existing document, as in every store, and a reference
to a missing document rolls the batch back. Kuzu allows one write transaction at a time in a database (a
second one fails at once, it does not wait), so the store serialises its
writers with a lock; readers run concurrently.

``find`` is ``MATCH ... WHERE ... WITH n ORDER BY ... LIMIT ...``: an
equality on a reference field at the top of the filter becomes a pattern
anchored at the referenced node (``(n)-[:R]->(:T {id: $a0})``: an index
lookup and a walk along the edges, the graph way); other conditions on
reference fields read the edge's end through ``OPTIONAL MATCH``. Filters
compile to Cypher with parameters (``to_cypher``).

``size_bytes`` is the pages Kuzu's ``storage_info`` reports for the
collection's node table and its REL tables (x 4096 bytes): before a
checkpoint those of the in-memory chunks, after one those on disk.
``compact`` is ``CHECKPOINT`` (the write-ahead log merged into the database
file; Kuzu does not rewrite tables to reclaim deleted rows).

``url`` is the database path (Kuzu 0.11 keeps a file there and a ``.wal``
beside it); without one, a private temporary directory removed on close.
Option ``mode: memory`` is Kuzu's in-memory database (no files; this
process only). One process at a time may open a database for writing, so
clients are threads.

One piece: the Cypher text, the node/edge model and the per-thread
connections it needs are the adapter; the Cypher shared with FalkorDB is
already in ``cypher.py``.
"""

from __future__ import annotations

import importlib.util  # noqa: F401  (kuzu 0.11 calls importlib.util without importing it)
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from importlib import metadata
from typing import Any

import kuzu
import numpy as np
import pyarrow as pa
from kuzu.prepared_statement import PreparedStatement
from pydantic import PositiveInt

from storebench.data.batch import DocBatch, Schema
from storebench.errors import ForeignDataError, UserError
from storebench.stores.base import DOCUMENTS, Capability, Collection, Store, StoreSpec
from storebench.stores.columns import DTYPES, last_per_id
from storebench.stores.config import FILE, InMemoryMode
from storebench.stores.graph import cypher
from storebench.stores.graph.cypher import ID, VEC, MissingReference
from storebench.stores.params import IndexParams

_KUZU_TYPE = {"int": "INT64", "float": "DOUBLE", "bool": "BOOLEAN", "str": "STRING"}
PAGE_SIZE = 4096  # Kuzu's page size (storage_info counts pages)
_PREPARED_PER_CONNECTION = 256


def ident(name: str) -> str:
    """A Cypher identifier in backticks."""
    return cypher.ident(name, "kuzu", "Kuzu")


def _table(result: Any) -> pa.Table:
    """A query's result as a pyarrow table (empty for a statement)."""
    assert isinstance(result, kuzu.QueryResult)
    try:
        if not result.get_column_names():
            return pa.table({})
        # without a chunk size, get_as_arrow sizes chunks for 10 million
        # values: milliseconds for a 10-row answer
        return result.get_as_arrow(chunk_size=max(result.get_num_tuples(), 1))
    finally:
        result.close()


def _numpy(a: pa.Array, dtype: Any) -> np.ndarray:
    """A pyarrow array as numpy: fixed-width columns without nulls from their
    buffer, others element-wise. (pyarrow's own to_numpy imports pandas: half
    a second inside the first timed read.)"""
    dt = np.dtype(dtype)
    if dt.kind in "if" and a.null_count == 0 and pa.types.is_primitive(a.type):
        width = a.type.bit_width // 8
        if width == dt.itemsize:
            buf = a.buffers()[1]
            return np.frombuffer(buf, dt, len(a), a.offset * width).copy()
    return np.array(a.to_pylist(), dtype=dt)


_PARAM = re.compile(r"\$(\w+)")


def _used(query: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters the statement names (Kuzu refuses any other)."""
    names = set(_PARAM.findall(query))
    return {k: v for k, v in params.items() if k in names}


def _type_of(value: Any) -> Any:
    """A parameter's type, as Kuzu binds it when preparing (lists by their
    first element)."""
    if isinstance(value, list):
        return ("list", _type_of(value[0]) if value else None)
    return type(value)


def _count(table: pa.Table) -> int:
    return int(table.column("c")[0].as_py()) if table.num_rows else 0


class KuzuCollection(cypher.CypherCollection):
    store: KuzuStore

    # --- names -------------------------------------------------------------------
    def rel(self, field: str) -> str:
        return f"{self.name}__{field}"

    def _live_refs(self) -> list[str]:
        gone = self.store._dropped_rels
        return [f for f in self._refs if self.rel(f) not in gone]

    _ident = staticmethod(ident)
    _one_type_lists = True

    def _edge(self, field: str) -> str | None:
        rel = self.rel(field)
        return None if rel in self.store._dropped_rels else ident(rel)

    def _var(self, field: str) -> int:
        return self._refs.index(field)

    # --- reading -----------------------------------------------------------------
    def _returns(self, with_vectors: bool) -> tuple[str, str]:
        """OPTIONAL MATCHes for the references and the RETURN list (columns
        c0.. in schema order, vector last)."""
        live = set(self._live_refs())
        opt = "".join(
            f" OPTIONAL MATCH (n)-[:{ident(self.rel(f))}]->(t{i}:{self._target(f)})"
            for i, f in enumerate(self._refs)
            if f in live
        )
        cols = [f"n.{ID} AS id"]
        for j, f in enumerate(self.schema.fields):
            if f not in self.schema.refs:
                cols.append(f"n.{ident(f)} AS c{j}")
            elif f in live:
                cols.append(f"coalesce(t{self._refs.index(f)}.{ID}, -1) AS c{j}")
            else:
                cols.append(f"-1 AS c{j}")
        if with_vectors and self._vec:
            cols.append(f"n.{VEC} AS v")
        return opt, ", ".join(cols)

    def _to_batch(self, table: pa.Table, with_vectors: bool) -> DocBatch:
        fields: dict[str, np.ndarray] = {}
        for j, (f, kind) in enumerate(self.schema.fields.items()):
            fields[f] = _numpy(table.column(f"c{j}").combine_chunks(), DTYPES[kind])
        ids = _numpy(table.column("id").combine_chunks(), np.int64)
        vecs = None
        if with_vectors and self._vec:
            flat = table.column("v").combine_chunks().flatten()
            vecs = _numpy(flat, np.float32).reshape(len(ids), int(self.schema.dim or 0))
        return DocBatch(ids, fields, vecs)

    def _field_pos(self, field: str) -> int:
        return list(self.schema.fields).index(field)

    def count(self) -> int:
        table = self.store.read(f"MATCH (n:{self._node}) RETURN count(*) AS c", {})
        return int(table.column("c")[0].as_py())

    # --- writing -----------------------------------------------------------------
    def _columns(self, docs: DocBatch, fields: list[str]) -> dict[str, Any]:
        """The batch as list parameters, one per column (``$k[i]``, ``$c0[i]``,
        ...; Kuzu lists are 1-based): no map per document. (Kuzu's pyarrow
        scan, ``LOAD FROM``, measured slower here, even at 10,000 rows.)"""
        cols: dict[str, Any] = {"n": len(docs), "k": docs.ids.tolist()}
        for f in fields:
            cols[f"c{self._field_pos(f)}"] = docs.fields[f].tolist()
        if docs.vectors is not None and self._vec:
            cols["v"] = docs.vectors.tolist()
        return cols

    def _write(self, docs: DocBatch, fields: list[str], merge: bool) -> None:
        props = [f for f in fields if f not in self.schema.refs]
        refs = [f for f in fields if f in self.schema.refs and f in self._live_refs()]
        sets = [f"n.{ident(f)} = $c{self._field_pos(f)}[i]" for f in props]
        if docs.vectors is not None and self._vec:
            sets.append(f"n.{VEC} = $v[i]")
        params = self._columns(docs, fields)
        rows = "UNWIND range(1, $n) AS i"
        node = f"(n:{self._node} {{{ID}: $k[i]}})"
        with self.store.writing() as run:
            if refs:
                # the references being written replace the old edges; counts the
                # documents that exist (an update skips missing ids)
                types = "|".join(ident(self.rel(f)) for f in refs)
                run(f"{rows} MATCH {node}-[e:{types}]->() DELETE e", params)
                targets = ", ".join(
                    f"(t{j}:{self._target(f)} {{{ID}: $c{self._field_pos(f)}[i]}})"
                    for j, f in enumerate(refs)
                )
                q = f"{rows} MATCH {targets} {'MERGE' if merge else 'MATCH'} {node}"
            else:
                q = f"{rows} {'MERGE' if merge else 'MATCH'} {node}"
            if sets:
                q += " SET " + ", ".join(sets)
            if refs:
                q += " CREATE " + ", ".join(
                    f"(n)-[:{ident(self.rel(f))}]->(t{j})" for j, f in enumerate(refs)
                )
            written = _count(run(q + " RETURN count(*) AS c", params))
            if merge and written != len(docs):  # the transaction rolls back
                raise MissingReference(
                    f"{len(docs) - written} of {len(docs)} documents reference a document "
                    f"missing from {sorted({self.schema.refs[f] for f in refs})}: nothing written"
                )
            if not merge and refs:
                present = _count(run(f"{rows} MATCH {node} RETURN count(*) AS c", params))
                if written != present:
                    raise MissingReference(
                        f"{present - written} of {present} updates reference a document "
                        f"missing from {sorted({self.schema.refs[f] for f in refs})}: "
                        "nothing written"
                    )

    def insert(self, docs: DocBatch) -> None:
        self._write(last_per_id(docs), list(self.schema.fields), merge=True)

    def update(self, docs: DocBatch) -> None:
        if not docs.fields and docs.vectors is None:
            return
        self._write(docs, list(docs.fields), merge=False)

    def delete(self, ids: np.ndarray) -> None:
        with self.store.writing() as run:
            run(
                f"UNWIND $ids AS i MATCH (n:{self._node} {{{ID}: i}}) DETACH DELETE n",
                {"ids": ids.tolist()},
            )

    def size_bytes(self) -> int:
        # storage_info counts checkpointed pages only: until a checkpoint,
        # new rows live in the write-ahead log, attributed to no table (a
        # size read before would be a fraction of the data). A checkpoint
        # changes no content.
        self.compact()
        tables = [self.name, *(self.rel(f) for f in self._live_refs())]
        pages = 0
        for t in tables:
            info = self.store.read(f"CALL storage_info('{t}') RETURN sum(num_pages) AS p", {})
            pages += int(info.column("p")[0].as_py() or 0)
        return pages * PAGE_SIZE

    def compact(self) -> None:
        with self.store.writing(transaction=False) as run:
            run("CHECKPOINT", {})

    def _drop(self) -> None:
        self.store._drop_node_table(self)


class KuzuStore(Store):
    """Options: ``mode`` (``file``, the default, or ``memory``) and
    ``buffer_pool_mb`` (Kuzu's buffer pool; its default is most of RAM)."""

    async_ops = "inline"
    engine = "kuzu"
    collection = KuzuCollection
    capabilities = DOCUMENTS | {Capability.ORDER, Capability.SIZE, Capability.COMPACT}
    extra = "kuzu"
    url_form = FILE
    handles = ("db",)

    class Options(InMemoryMode):
        buffer_pool_mb: PositiveInt | None = None

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        path = ":memory:" if self.options.mode == "memory" else self.local_path("db.kuzu")
        self.path = path
        kw: dict[str, Any] = {}
        if self.options.buffer_pool_mb is not None:
            kw["buffer_pool_size"] = self.options.buffer_pool_mb << 20
        try:
            self.db = kuzu.Database(path, **kw)
        except RuntimeError as exc:
            raise UserError(
                f"cannot open the Kuzu database {path}: {exc}", where="store kuzu"
            ) from exc
        self._local = threading.local()
        self._write_lock = threading.Lock()  # Kuzu: one write transaction at a time
        self._dropped_rels: set[str] = set()

    # --- connections and queries -----------------------------------------------
    def connection(self) -> kuzu.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = kuzu.Connection(self.db)
            self._local.conn = conn
            self._local.prepared = OrderedDict()
        return conn

    def execute(self, query: str, params: dict[str, Any]) -> pa.Table:
        """Run a statement on this thread's connection. A statement with
        parameters runs from a prepared statement kept per connection and per
        parameter types: kuzu 0.11 leaks about 10 kB for each
        ``execute(query, parameters)`` (it prepares anew every time), which
        grew a social run past 6 GB."""
        conn = self.connection()
        params = _used(query, params)
        if not params:
            return _table(conn.execute(query))
        cache: OrderedDict[Any, PreparedStatement] = self._local.prepared
        key = (query, tuple((k, _type_of(v)) for k, v in sorted(params.items())))
        prepared = cache.get(key)
        if prepared is None:
            prepared = PreparedStatement(conn, query, params)
            if not prepared.is_success():
                raise RuntimeError(prepared.get_error_message())
            cache[key] = prepared
            if len(cache) > _PREPARED_PER_CONNECTION:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        return _table(conn.execute(prepared, params))

    def read(self, query: str, params: dict[str, Any]) -> pa.Table:
        return self.execute(query, params)

    @contextmanager
    def writing(
        self, transaction: bool = True
    ) -> Iterator[Callable[[str, dict[str, Any]], pa.Table]]:
        """Serialised writes, in one transaction."""
        conn = self.connection()

        def run(query: str, params: dict[str, Any]) -> pa.Table:
            return self.execute(query, params)

        with self._write_lock:
            if not transaction:
                yield run
                return
            conn.execute("BEGIN TRANSACTION")
            try:
                yield run
            except BaseException:
                with suppress(RuntimeError):  # a failed statement already rolled back
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _tables(self) -> dict[str, str]:
        """Table name -> NODE or REL."""
        t = self.read("CALL show_tables() RETURN name, type", {})
        return dict(zip(t.column("name").to_pylist(), t.column("type").to_pylist(), strict=True))

    # --- collections ---------------------------------------------------------------
    def has_collection(self, name: str) -> bool:
        return self._tables().get(name) == "NODE"

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        coll = KuzuCollection(self, name, schema)  # checks the names
        tables = self._tables()
        for f, target in schema.refs.items():
            if tables.get(target) != "NODE" and target != name:
                raise UserError(
                    f"{name}.{f} references {target!r}, which is not a collection here "
                    "(create it first)",
                    where="store kuzu",
                )
            if coll.rel(f) in tables:
                raise ForeignDataError(f"table {coll.rel(f)!r} already exists in {self.path}")
        cols = [f"{ID} INT64"] + [
            f"{ident(f)} {_KUZU_TYPE[k]}" for f, k in schema.fields.items() if f not in schema.refs
        ]
        if schema.dim is not None:
            cols.append(f"{VEC} FLOAT[{int(schema.dim)}]")
        with self.writing(transaction=False) as run:
            run(f"CREATE NODE TABLE {ident(name)}({', '.join(cols)}, PRIMARY KEY({ID}))", {})
            for f, target in schema.refs.items():
                run(
                    f"CREATE REL TABLE {ident(coll.rel(f))}(FROM {ident(name)} TO {ident(target)})",
                    {},
                )
        self._dropped_rels -= {coll.rel(f) for f in schema.refs}
        return coll

    def _drop_node_table(self, coll: KuzuCollection) -> None:
        """Drop the collection's REL tables, the REL tables other collections
        of this store hold into it (edges cannot outlive their nodes), then
        its node table. A REL table into it from a collection this store did
        not create makes it refuse, before anything is dropped."""
        tables = self._tables()
        own = {coll.rel(f) for f in coll._refs} & set(tables)
        incoming: list[str] = []
        for t, kind in tables.items():
            if kind != "REL" or t in own:
                continue
            conn = self.read(f"CALL show_connection('{t}') RETURN *", {})
            ends = set(conn.column(0).to_pylist()) | set(conn.column(1).to_pylist())
            if coll.name not in ends:
                continue
            source = conn.column(0).to_pylist()[0]
            if source not in self._created:
                raise ForeignDataError(
                    f"refusing to drop {coll.name!r} in kuzu: {source!r} (not created by this "
                    f"run) references it through {t!r}"
                )
            incoming.append(t)
        with self.writing(transaction=False) as run:
            for t in [*own, *incoming]:
                run(f"DROP TABLE {ident(t)}", {})
                self._dropped_rels.add(t)
            run(f"DROP TABLE {ident(coll.name)}", {})

    def versions(self) -> dict[str, str]:
        return {
            "engine": f"Kuzu {kuzu.__version__}",
            "client": f"kuzu {metadata.version('kuzu')} (embedded)",
        }

    def close(self) -> None:
        self._local = threading.local()
        super().close()
