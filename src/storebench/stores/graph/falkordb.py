"""The FalkorDB store: a property graph (Cypher) over the Redis protocol,
through the ``falkordb`` client.

One graph holds a store's collections (references are edges, and edges live
inside one graph): option ``graph`` names it (default: a new graph
``storebench_<random>``, recorded in the resolved spec so client processes
reach the same one). A collection is a node label: nodes ``(:<collection>
{id, <fields>, vec})``, with a range index on ``id`` (which also marks the
label as a storebench collection) and on each field listed in
``Schema.indexed``. Each reference field (``Schema.refs``) is an edge of
type ``<field>`` from the document to the referenced node; reading the field
returns the id at the edge's end (-1 when there is none, e.g. after the
referenced document was deleted: ``DETACH DELETE`` takes its edges). The
vector, when the schema has one, is a list property (float32 values as
doubles: exact), only stored and returned: the store declares no search.
(Not ``vecf32``: FalkorDB 4.16 loses some updates of an existing ``vecf32``
property.)

Writes are one query per batch over list parameters, one list per column
(``UNWIND range(0, $n - 1) AS i MERGE (n:L {id: $k[i]}) SET ...``): an
insert replaces an existing document, as in every store; referenced nodes
are matched first, so a document whose reference points at nothing is not
written (and the insert fails, naming how many). ``find`` is ``MATCH ...
WHERE ... WITH n ORDER BY ... LIMIT``; an equality on a reference field at
the top of the filter becomes a pattern anchored at the referenced node (an
index lookup, then the edges), other conditions on references read the
edge's end through ``OPTIONAL MATCH``. Filters compile to Cypher with
parameters (``to_cypher``).

No size: FalkorDB reports memory per graph and per label in whole megabytes
only (``GRAPH.MEMORY USAGE``), and keeps no other per-collection account.
No compaction command either.

Without a URL it runs on a managed FalkorDB (``servers/falkordb.py``,
started and stopped by ``stores.opening``); with ``redis://[:password@]host:port/db`` it only
connects (``REDIS_PASSWORD`` fills in a password the URL leaves out).
``drop`` deletes the label's nodes and indexes, and the graph itself only
if this store created it and nothing is left in it.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

import falkordb
import numpy as np
import redis

from storebench.data.batch import DocBatch, Schema
from storebench.errors import StorebenchError, UserError
from storebench.stores.base import DOCUMENTS, Capability, RamUse, Store, StoreSpec, redact_url
from storebench.stores.columns import batch_from_rows, last_per_id
from storebench.stores.config import StoreOptions
from storebench.stores.graph import cypher
from storebench.stores.graph.cypher import ID, VEC, MissingReference
from storebench.stores.params import IndexParams
from storebench.stores.vector.redis.store import REDIS_URL, connect_options, module_versions


class IndexFailed(StorebenchError):
    """FalkorDB reported an index it could not build."""


def ident(name: str) -> str:
    """A Cypher identifier in backticks (FalkorDB has no escape for a backtick)."""
    return cypher.ident(name, "falkordb", "FalkorDB")


class FalkorDBCollection(cypher.CypherCollection):
    store: FalkorDBStore

    def __init__(self, store: FalkorDBStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._names = list(schema.fields)

    _ident = staticmethod(ident)
    _edge = staticmethod(ident)  # a reference's edge type: the field's name

    def _var(self, field: str) -> int:
        return self._names.index(field)

    # --- reading -----------------------------------------------------------------
    def _returns(self, with_vectors: bool) -> tuple[str, str]:
        opt = "".join(
            f" OPTIONAL MATCH (n)-[:{ident(f)}]->(t{self._var(f)}:{self._target(f)})"
            for f in self._refs
        )
        cols = [f"n.{ID}"]
        for j, f in enumerate(self._names):
            if f in self.schema.refs:
                cols.append(f"coalesce(t{j}.{ID}, -1) AS c{j}")
            else:
                cols.append(f"n.{ident(f)} AS c{j}")
        if with_vectors and self._vec:
            cols.append(f"n.{VEC}")
        return opt, ", ".join(cols)

    def _to_batch(self, rows: list[list[Any]], with_vectors: bool) -> DocBatch:
        # the vector (a list of doubles) comes last when asked for and the schema has one
        return batch_from_rows(self.schema, rows, with_vectors and self._vec, blobs=False)

    def count(self) -> int:
        rows = self.store.read(f"MATCH (n:{self._node}) RETURN count(n)", {})
        return int(rows[0][0])

    # --- writing -----------------------------------------------------------------
    def _write(self, docs: DocBatch, fields: list[str], merge: bool) -> int:
        """One query for the batch; returns the documents written."""
        params: dict[str, Any] = {"n": len(docs), "k": docs.ids.tolist()}
        for f in fields:
            params[f"c{self._var(f)}"] = docs.fields[f].tolist()
        refs = [f for f in fields if f in self.schema.refs]
        sets = [f"n.{ident(f)} = $c{self._var(f)}[i]" for f in fields if f not in self.schema.refs]
        if docs.vectors is not None and self._vec:
            params["v"] = docs.vectors.tolist()
            # a list of doubles, not vecf32: FalkorDB 4.16 loses some updates of
            # an existing vecf32 property (the SET reports fewer properties set)
            sets.append(f"n.{VEC} = $v[i]")
        q = "UNWIND range(0, $n - 1) AS i"
        # referenced nodes first: a row whose reference points at nothing goes
        for f in refs:
            q += f" MATCH (t{self._var(f)}:{self._target(f)} {{{ID}: $c{self._var(f)}[i]}})"
        q += f" {'MERGE' if merge else 'MATCH'} (n:{self._node} {{{ID}: $k[i]}})"
        if sets:
            q += " SET " + ", ".join(sets)
        if refs:
            keep = ", ".join(["n", *(f"t{self._var(f)}" for f in refs)])
            types = "|".join(ident(f) for f in refs)
            q += (
                f" WITH {keep} OPTIONAL MATCH (n)-[e:{types}]->() DELETE e"
                f" WITH DISTINCT {keep} CREATE "
                + ", ".join(f"(n)-[:{ident(f)}]->(t{self._var(f)})" for f in refs)
            )
        q += " RETURN count(n)"
        rows = self.store.write(q, params)
        return int(rows[0][0]) if rows else 0

    def insert(self, docs: DocBatch) -> None:
        docs = last_per_id(docs)
        written = self._write(docs, self._names, merge=True)
        if written != len(docs):
            raise MissingReference(
                f"{len(docs) - written} of {len(docs)} documents reference a document "
                f"missing from {sorted(set(self.schema.refs.values()))}: those were not written"
            )

    def update(self, docs: DocBatch) -> None:
        if not docs.fields and docs.vectors is None:
            return
        self._write(docs, list(docs.fields), merge=False)

    def delete(self, ids: np.ndarray) -> None:
        self.store.write(
            f"UNWIND $ids AS k MATCH (n:{self._node} {{{ID}: k}}) DETACH DELETE n",
            {"ids": ids.tolist()},
        )

    def _drop(self) -> None:
        self.store._drop_label(self.name)


class FalkorDBStore(Store):
    """Options: ``graph`` (the graph's name), ``persistence`` (managed server:
    ``none``, ``rdb`` or ``aof``) and ``module_args`` (managed server: the
    module's arguments, e.g. ``[THREAD_COUNT, 4]``)."""

    engine = "falkordb"
    collection = FalkorDBCollection
    capabilities = DOCUMENTS | {Capability.ORDER, Capability.SHARED_ACROSS_PROCESSES}
    extra = "falkordb"
    client_dist = "falkordb"
    url_form = REDIS_URL
    # the managed FalkorDB keeps the graph in RAM; vectors as lists of doubles
    ram = RamUse(vector=8, fields=2, overhead=256, fixed_mib=32)
    server = "falkordb:FalkorDBServer"
    handles = ("db",)

    class Options(StoreOptions):
        managed_only = ("persistence", "module_args")
        graph: str | None = None
        persistence: Literal["none", "rdb", "aof"] = "none"
        module_args: list[str | int | float] = []

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        if not self.options.graph:
            self.fill_option("graph", f"storebench_{uuid.uuid4().hex[:12]}")
        self.graph_name = str(self.options.graph)
        self.db = self._connect()
        self.graph = self.db.select_graph(self.graph_name)
        # a graph that exists now is someone's: never deleted by this store
        self._made_graph = self.graph_name not in self._graphs()

    def _connect(self) -> falkordb.FalkorDB:
        url = self.spec.url or ""
        try:
            db = falkordb.FalkorDB.from_url(url, **connect_options(url))
            modules = db.connection.execute_command("MODULE", "LIST")
        except redis.RedisError as exc:
            raise UserError(
                f"cannot reach FalkorDB at {redact_url(url)}: {exc}", where="store falkordb"
            ) from exc
        versions = module_versions(modules)
        if "graph" not in versions:
            raise UserError(
                f"the Redis server at {redact_url(url)} has no graph module (FalkorDB)",
                where="store falkordb",
            )
        self._module_version = versions["graph"]
        return db

    def _graphs(self) -> list[str]:
        return [g.decode() if isinstance(g, bytes) else g for g in self.db.list_graphs()]

    # --- queries -------------------------------------------------------------------
    def read(self, query: str, params: dict[str, Any]) -> list[list[Any]]:
        return self.graph.ro_query(query, params).result_set

    def write(self, query: str, params: dict[str, Any]) -> list[list[Any]]:
        return self.graph.query(query, params).result_set

    def _indexes(self) -> dict[str, list[str]]:
        """Node label -> indexed properties (with their state checked)."""
        if self.graph_name not in self._graphs():
            return {}
        rows = self.read(
            "CALL db.indexes() YIELD label, properties, entitytype, status "
            "RETURN label, properties, entitytype, status",
            {},
        )
        out: dict[str, list[str]] = {}
        for label, props, kind, status in rows:
            if kind == "NODE":
                out[label] = list(props)
                # e.g. "OPERATIONAL" or "[Indexing] 0/0: UNDER CONSTRUCTION"
                if not str(status).endswith(("OPERATIONAL", "UNDER CONSTRUCTION")):
                    raise IndexFailed(f"falkordb index on {label}: {status}")
        return out

    # --- collections -----------------------------------------------------------------
    def has_collection(self, name: str) -> bool:
        if ID in self._indexes().get(name, []):
            return True
        if self.graph_name not in self._graphs():
            return False
        return bool(self.read(f"MATCH (n:{ident(name)}) RETURN 1 LIMIT 1", {}))

    def _create(self, name: str, schema: Schema, index: IndexParams) -> FalkorDBCollection:
        coll = FalkorDBCollection(self, name, schema)
        indexes = self._indexes()
        for f, target in schema.refs.items():
            if target != name and ID not in indexes.get(target, []):
                raise UserError(
                    f"{name}.{f} references {target!r}, which is not a collection in graph "
                    f"{self.graph_name!r} (create it first)",
                    where="store falkordb",
                )
        for prop in (ID, *schema.indexed):
            self.write(f"CREATE INDEX FOR (n:{ident(name)}) ON (n.{ident(prop)})", {})
        # an index on an empty label is ready at once; the state is checked
        if ID not in self._indexes().get(name, []):
            raise IndexFailed(f"falkordb: the index on {name}.id is missing after CREATE INDEX")
        return coll

    def location(self) -> str:
        return f"graph {self.graph_name!r}"

    def _drop_label(self, name: str) -> None:
        label = ident(name)
        self.write(f"MATCH (n:{label}) DETACH DELETE n", {})
        for prop in self._indexes().get(name, []):
            self.write(f"DROP INDEX FOR (n:{label}) ON (n.{ident(prop)})", {})
        empty = not self._indexes() and not self.read("MATCH (n) RETURN 1 LIMIT 1", {})
        if self._made_graph and empty:
            self.graph.delete()

    def engine_version(self) -> str:
        redis_version = self.db.connection.info("server").get("redis_version", "?")
        return f"FalkorDB {self._module_version} (Redis {redis_version})"
