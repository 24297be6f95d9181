"""The store contract: what every engine adapter implements.

A picklable ``StoreSpec`` names an engine and how to reach it (its URL and
options); ``spec.open()`` gives a live ``Store`` (one per process,
shared by that process's client threads); a store creates and opens
``Collection``s. A store never starts a server: it declares the one it can
be managed with (``Store.managed_server``) and ``stores.opening`` starts it
and hands the store its URL. Adapters declare their capabilities; every
method they do not implement raises ``NotSupported``. Index and search
parameters are not part of the spec: the run hands them, typed
(``stores.params``), to ``create_collection``, ``build_index`` and
``set_search_params``. Adapters never touch clocks: all timing is the
driver's.

One piece: the contract's parts (spec, store, collection, async view,
capabilities) refer to one another and are read together by every adapter.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from storebench.common import leftovers
from storebench.common.plugins import Kind
from storebench.common.redaction import (
    MASK,
    is_secret_key,
    redact,
    redact_obj,
    remember,
    remember_value,
)
from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.errors import ForeignDataError, NotSupported, UserError
from storebench.stores.config import ClusterOptions, StoreOptions, UrlForm, check_options, check_url
from storebench.stores.params import IndexParams, Order, SearchParams

if TYPE_CHECKING:
    from storebench.servers.base import Server
    from storebench.servers.cluster import Cluster

STORES = Kind("store", "storebench.stores", where="store", needs="client library")
ClientMode = Literal["threads", "processes"]


class Capability(enum.StrEnum):
    INSERT = "insert"
    GET = "get"
    UPDATE = "update"
    DELETE = "delete"
    FIND = "find"  # find(where, limit)
    ORDER = "order"  # find(..., order=...)
    SEARCH = "search"  # k nearest neighbours
    FILTERED_SEARCH = "filtered_search"  # search(..., where=...)
    INDEX = "index"  # build_index with parameters (ANN index)
    SEARCH_PARAMS = "search_params"  # set_search_params (ef, nprobe, ...)
    SIZE = "size"  # size_bytes
    COMPACT = "compact"
    SHARED_ACROSS_PROCESSES = "shared_across_processes"  # clients may be processes
    # insert_pipelined: several insert requests outstanding on one connection
    PIPELINE = "pipeline"


# Capability sets adapters start from (``capabilities = DOCUMENTS | {...}``)
DOCUMENTS = frozenset(
    {Capability.INSERT, Capability.GET, Capability.UPDATE, Capability.DELETE, Capability.FIND}
)  # documents by id and by condition: every store has these
VECTORS = frozenset(
    {Capability.SEARCH, Capability.FILTERED_SEARCH, Capability.INDEX, Capability.SEARCH_PARAMS}
)  # nearest neighbours with filters, an index with build and search parameters


@dataclass(slots=True)
class SearchResult:
    """k nearest neighbours per query: ids padded with -1, distances with inf.
    Distances are the metric's own: Euclidean for l2, 1-cos for cosine,
    negative inner product for ip (smaller is nearer in all three).

    One is made per query, so it is not frozen: a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``, three times
    the cost of a slot's plain store."""

    ids: np.ndarray  # (q, k) int64
    distances: np.ndarray  # (q, k) float32

    @classmethod
    def empty(cls, nq: int, k: int) -> SearchResult:
        """Nothing found for ``nq`` queries: every slot padding (-1, inf)."""
        return cls(np.full((nq, k), -1, np.int64), np.full((nq, k), np.inf, np.float32))

    @classmethod
    def from_rows(
        cls, queries: Sequence[Any], k: int, rows_of: Callable[[Any], list[Any]]
    ) -> SearchResult:
        """A search result from each query's ``(id, distance)`` rows, nearest
        first (``rows_of``: one query's, at most k; ``queries``: the vectors, or
        the engine's answer to each), padded with -1 and inf; nothing is asked
        for k = 0."""
        if not k:
            return cls.empty(len(queries), k)
        counts: list[int] = []
        flat: list[Any] = []
        for q in queries:
            rows = rows_of(q)
            counts.append(len(rows))
            flat += rows
        # two arrays made once, not a slice filled per query: 20-40 us less a
        # query on duckdb's path at ef 16
        ids, dist = zip(*flat, strict=True) if flat else ((), ())
        return cls.from_flat(np.array(ids, np.int64), np.array(dist, np.float32), counts, k)

    @classmethod
    def from_flat(
        cls, ids: np.ndarray, distances: np.ndarray, counts: Sequence[int] | np.ndarray, k: int
    ) -> SearchResult:
        """A search result from every query's answers one after another
        (query i's ``counts[i]`` of them, at most k, nearest first), each
        query's padded to k."""
        nq = len(counts)
        if len(ids) == nq * k:  # k each: the common case
            return cls(ids.reshape(nq, k), distances.reshape(nq, k))
        out = cls.empty(nq, k)
        mine = np.arange(k) < np.array(counts)[:, None]  # a query's answers, then padding
        out.ids[mine], out.distances[mine] = ids, distances
        return out


def redact_url(url: str | None) -> str | None:
    """The URL (or connection string) with every secret replaced by ``***``,
    for records and messages (``storebench.common.redaction.redact``)."""
    return None if url is None else redact(url)


# --- memory estimates (``Store.memory_use``) -------------------------------------

MiB = 1 << 20


def hnsw_bytes(dim: int, m: int) -> int:
    """RAM per vector of an HNSW index holding float32 vectors: the vector,
    ~2m neighbours (int32) on level 0 and a few more above, the library's
    bookkeeping (locks, id maps)."""
    return 4 * dim + 8 * m + 128


@dataclass(frozen=True)
class RamUse:
    """The RAM an engine takes (``Store.memory_use``): per document
    ``vector`` bytes a dimension, ``fields`` copies of the scalar fields and
    ``overhead`` bytes, plus an HNSW graph (``hnsw_bytes``) where the
    engine keeps one in RAM (``hnsw_m``: its default m); and ``fixed_mib`` MiB."""

    vector: int = 4
    fields: int = 1
    overhead: int = 64
    hnsw_m: int | None = None
    fixed_mib: int = 0

    def of(self, index: Any, dim: int, field_bytes: int) -> tuple[int, int]:
        per_doc = self.vector * dim + self.fields * field_bytes + self.overhead
        if self.hnsw_m is not None:
            per_doc += hnsw_bytes(dim, index.m or self.hnsw_m)
        return per_doc, self.fixed_mib * MiB


@dataclass(frozen=True)
class Pace:
    """How an engine's own work compares with the time estimate's generic
    priors, before any run of it is timed (``Store.pace``; 1.0: the prior).
    ``upload``: a document inserted (``workloads.base.DOC_S``); ``build``: a
    document an index build adds (``BUILD_S``); ``start``: a managed server
    or cluster node started (``run.progress.PRIOR_SERVER_S``). A timed run
    of the engine (this sweep's or an earlier one in the results file)
    replaces the prior: its seconds are rescaled by the same model."""

    upload: float = 1.0
    build: float = 1.0
    start: float = 1.0


@dataclass(frozen=True)
class StoreSpec:
    """Everything needed to open a store, in any process: how to reach it,
    never what to build or search with (the run carries those)."""

    engine: str
    url: str | None = None  # a path for embedded engines, a URL for servers
    options: Mapping[str, Any] = field(default_factory=dict)
    # ``options`` as the store's ``Options`` model, once checked (by the plan,
    # or by the store as it opens): client processes get it with the spec
    checked_options: StoreOptions | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # whatever is secret here is removed from all output from now on
        remember(self.url)
        for k, v in self.options.items():
            if isinstance(v, str):
                (remember_value if is_secret_key(str(k)) else remember)(v)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # unpickled in a client process (processes, Ray): it knows the secrets too
        for k, v in state.items():
            object.__setattr__(self, k, v)
        self.__post_init__()

    def server_maker(self) -> tuple[StoreOptions, Callable[[], Server | Cluster] | None]:
        """The checked options, and what builds the managed server opening
        this spec needs (None: it has a URL, or the store runs embedded or
        needs a URL). Builds and starts nothing."""
        cls = store_class(self.engine)
        options = self.checked_options
        if not isinstance(options, cls.Options):
            options = cls.check_options(self.options, None)
        return options, None if self.url is not None else cls.managed_server(options)

    def open(self) -> Store:
        """The store, on this spec as it is. If opening fails or is
        interrupted half-way, what it had started goes (the adapter's
        ``close`` on what its ``__init__`` opened, a private directory). A spec without a URL for a store that is managed with a
        server is refused: ``stores.opening.open_store`` starts the server
        (client processes open the spec that has its URL)."""
        cls = store_class(self.engine)
        if self.server_maker()[1] is not None:
            raise UserError(
                f"store {self.engine} without a url runs on a managed server: "
                "open it with storebench.stores.opening.open_store, which starts it",
                where="store",
            )
        store = cls.__new__(cls)
        try:
            type(store).__init__(store, self)
        except BaseException:
            # the adapter's own close, on whatever its __init__ got to open
            with contextlib.suppress(Exception):
                store.close()
            Store.close(store)
            raise
        return store

    def with_(self, **changes: Any) -> StoreSpec:
        if "options" in changes:  # checked anew, unless the caller gives them checked
            changes.setdefault("checked_options", None)
        return replace(self, **changes)

    def describe(self) -> dict[str, Any]:
        """For result records (and the run's key, with the run's index and
        search parameters: ``Run.store_info``): no credentials."""
        return {
            "engine": self.engine,
            "url": redact_url(self.url),
            "options": {
                k: (MASK if is_secret_key(str(k)) else redact_obj(v))
                for k, v in self.options.items()
            },
        }


class Collection:
    """One collection (table, index, keyspace) of a store.

    Each method an adapter leaves alone raises ``NotSupported``. Methods take
    and return columnar data (``DocBatch``, numpy arrays)."""

    def __init__(self, store: Store, name: str, schema: Schema):
        self.store = store
        self.name = name
        self.schema = schema

    def _unsupported(self, cap: Capability) -> NotSupported:
        return NotSupported(self.store.engine, str(cap))

    def insert(self, docs: DocBatch) -> None:
        raise self._unsupported(Capability.INSERT)

    def insert_pipelined(self, batches: Sequence[DocBatch]) -> None:
        """Insert each batch as its own request (command group, statement) on
        one connection, sending every request before reading any reply
        (pipelining); returns once all are answered. The effect is that of
        ``insert`` on each batch; how the engine groups them (e.g. one
        implicit transaction per Postgres pipeline) is the adapter's to say."""
        raise self._unsupported(Capability.PIPELINE)

    # --- the native client (``client: native``) -------------------------------
    # which operations this collection can prepare for the native timed loop
    # (``driver/native.py``): a subset of {"insert", "search"}
    native_ops: frozenset[str] = frozenset()

    def native_insert(self, ops: Sequence[Sequence[DocBatch]]) -> Any:
        """One client's native op (``storebench_fastclient``), connected and
        prepared before the clock: operation j sends the batches ``ops[j]``
        as ``insert_pipelined`` does (one batch: as ``insert``), the same
        requests, on a connection of its own."""
        raise NotSupported(self.store.engine, "the native client for insert")

    def native_search(self, queries: np.ndarray, k: int) -> Any:
        """One client's native op: operation j is ``search(queries[j], k)``
        (no filter), keeping the ids returned (``native.results``)."""
        raise NotSupported(self.store.engine, "the native client for search")

    def get(self, ids: np.ndarray) -> DocBatch:
        """Documents with these ids (missing ids are left out), in any order."""
        raise self._unsupported(Capability.GET)

    def update(self, docs: DocBatch) -> None:
        """Replace the given fields (and vectors, if present) of existing ids."""
        raise self._unsupported(Capability.UPDATE)

    def delete(self, ids: np.ndarray) -> None:
        raise self._unsupported(Capability.DELETE)

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        """Documents matching ``where`` (scalar fields, no vectors).
        ``order`` is (field, descending)."""
        raise self._unsupported(Capability.ORDER if order else Capability.FIND)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        raise self._unsupported(
            Capability.FILTERED_SEARCH if where is not None else Capability.SEARCH
        )

    def count(self) -> int:
        """Live documents, as the engine itself counts them."""
        raise NotImplementedError

    def build_index(self, params: IndexParams) -> bool | None:
        """Build the vector index and return once the engine says it is ready.

        An engine that indexes documents as they are inserted, and finds its
        index already complete with these parameters, builds nothing and
        returns ``False``: the record then says the index was built during
        the upload (no build time, no build rate), never a build of 0 s."""
        raise self._unsupported(Capability.INDEX)

    def set_search_params(self, params: SearchParams) -> None:
        """Search with these from now on, on every connection of the store;
        a parameter left None keeps the value in force."""
        raise self._unsupported(Capability.SEARCH_PARAMS)

    def size_bytes(self) -> int:
        raise self._unsupported(Capability.SIZE)

    def compact(self) -> None:
        raise self._unsupported(Capability.COMPACT)

    def aio(self, share: AsyncView | None = None) -> AsyncView:
        """An async view of this collection for one event-loop client (the
        ``async`` executor): its own connection where the engine's official
        client is async (an adapter overrides this), else the sync methods
        run inline on the loop (``AsyncView``). ``share``: a view of the
        same client on another collection whose connection this one uses
        (one connection per client, as a thread client has)."""
        return AsyncView(self)

    def drop(self) -> None:
        """Remove the collection, only if this store created it."""
        self.store._check_owned(self.name)
        self._drop()
        self.store._created.discard(self.name)
        self.store._opened.pop(self.name, None)

    def _drop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release the engine handles this collection holds (a store that
        ``keeps_open``: called by ``Store.close``)."""


class AsyncView:
    """The collection methods the workloads time, as coroutines, for one
    event-loop client: ``open`` before its first call (untimed: connect,
    prepare), ``close`` after its last. This default runs the sync methods
    inline, holding the loop for each call: what an in-process engine's
    call does anyway (it holds the GIL); an adapter whose engine has an
    official async client subclasses it with that client, one connection
    per view. A method the engine lacks raises ``NotSupported`` as the
    sync one does."""

    native = False  # True: the engine's async client; False: sync calls inline

    def __init__(self, coll: Collection, share: AsyncView | None = None):
        self.coll = coll
        # a view of the same kind whose connection this one uses (one client
        # viewing several collections holds one connection); else None
        self.share = share if type(share) is type(self) else None

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def insert(self, docs: DocBatch) -> None:
        self.coll.insert(docs)

    async def insert_pipelined(self, batches: Sequence[DocBatch]) -> None:
        self.coll.insert_pipelined(batches)

    async def get(self, ids: np.ndarray) -> DocBatch:
        return self.coll.get(ids)

    async def update(self, docs: DocBatch) -> None:
        self.coll.update(docs)

    async def delete(self, ids: np.ndarray) -> None:
        self.coll.delete(ids)

    async def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        return self.coll.find(where, order, limit)

    async def search(
        self, vectors: np.ndarray, k: int, where: Filter | None = None
    ) -> SearchResult:
        return self.coll.search(vectors, k, where)


class Store:
    """A live connection to one engine, opened from a ``StoreSpec``."""

    engine: ClassVar[str]
    capabilities: ClassVar[frozenset[Capability]]
    client_mode: ClassVar[ClientMode] = "threads"  # the driver's default for this engine
    # what the ``async`` executor's clients run (``Collection.aio``):
    # "native" the engine's official async client, one connection per
    # client; "inline" the sync calls on the loop, for an engine that runs
    # in this process (its calls hold the GIL, on a thread as on the loop);
    # None: sync calls that wait on a server, which inline would hold up
    # the loop's other clients for each round trip (``choose_executor``)
    async_ops: ClassVar[Literal["native", "inline"] | None] = None
    exact: ClassVar[bool] = False  # search is exhaustive: recall must be 1.0
    # the index and search parameters it takes (``stores.params``; the
    # defaults: none)
    Index: ClassVar[type[IndexParams]] = IndexParams
    Search: ClassVar[type[SearchParams]] = SearchParams
    # StoreSpec.options, typed (the default: none)
    Options: ClassVar[type[StoreOptions]] = StoreOptions
    # the URLs it takes (None: none); checked before a run starts
    url_form: ClassVar[UrlForm | None] = None
    extra: ClassVar[str | None] = None  # the pip extra that brings its client
    # what ``_open`` makes of an existing collection: (store, name, schema)
    collection: ClassVar[Callable[..., Collection]]
    # the RAM it takes in this process, or its managed server in its own
    # (``memory_use``; the default: one copy of each document)
    ram: ClassVar[RamUse] = RamUse()
    pace: ClassVar[Pace] = Pace()  # its work against the time estimate's priors
    # set by __init__; here too for a store whose __init__ did not get that far
    _private_dir: str | None = None
    # attributes holding the engine's client objects: ``close`` closes each
    # one that is set (before removing the private directory)
    handles: ClassVar[tuple[str, ...]] = ()
    # the server it can be managed with, as "<module>:<class>" of
    # ``storebench.servers`` (imported only when used); None: none
    server: ClassVar[str | None] = None
    # each collection ``_open`` makes is kept for the store's life (it holds
    # the engine's handle on its files): opened again, the same one; ``close``
    # closes it
    keeps_open: ClassVar[bool] = False
    # the distribution of the engine's Python client, for ``versions``
    client_dist: ClassVar[str | None] = None

    @classmethod
    def managed_server(cls, options: Any) -> Callable[[], Server | Cluster] | None:
        """How to make the local server this store runs on when given no
        URL, from its checked ``Options``: a callable that builds the
        ``Server`` (not started; ``stores.opening`` starts it, hands the
        store its URL and stops it after). The default: the ``server``
        class, given the options only it takes (``Options.managed_only``)
        by their names, as one server or, with ``ClusterOptions``, the
        cluster they ask for (``servers.cluster.build``); None without one
        (the store runs embedded, or needs a URL)."""
        if cls.server is None:
            return None
        module, name = cls.server.split(":")
        server_class = getattr(importlib.import_module(f"storebench.servers.{module}"), name)
        make = functools.partial(
            server_class,
            **{
                k: getattr(options, k)
                for k in options.managed_only
                if k not in ClusterOptions.managed_only
            },
        )
        if not isinstance(options, ClusterOptions):
            return make
        build = importlib.import_module("storebench.servers.cluster").build
        return functools.partial(build, make, **options.topology())

    @classmethod
    def check_url(cls, url: str | None) -> Any:
        """What ``url_form`` makes of ``url`` (``UrlForm.check``); a
        ``SpecError`` (a ``UserError``) if the store does not take it, or
        needs a URL and got none. Connects to nothing."""
        return check_url(cls.engine, cls.url_form, url)

    @classmethod
    def check_options(cls, options: Mapping[str, Any], url: str | None = None) -> StoreOptions:
        """``options`` as the store's ``Options``; a ``SpecError`` naming the
        first unknown or bad one."""
        return check_options(cls.engine, cls.Options, options, url)

    @classmethod
    def check_spec(cls, url: str | None, options: Mapping[str, Any]) -> StoreOptions:
        """Both checks, as the plan makes them before a run starts."""
        cls.check_url(url)
        return cls.check_options(options, url)

    def __init__(self, spec: StoreSpec):
        self.check_url(spec.url)
        if not isinstance(spec.checked_options, self.Options):
            spec = spec.with_(checked_options=self.check_options(spec.options, spec.url))
        self.options: Any = spec.checked_options  # the adapter's Options
        self.spec = spec
        self._created: set[str] = set()
        self._opened: dict[str, Collection] = {}  # the collections kept (``keeps_open``)
        # A private temporary directory (``private_dir``); removed on close.
        self._private_dir: str | None = None

    def fill_option(self, name: str, value: Any) -> None:
        """Set an option the store chose itself (a generated name), in the
        spec client processes open and the record shows."""
        self.options = self.options.model_copy(update={name: value})
        self.spec = self.spec.with_(
            options={**self.spec.options, name: value}, checked_options=self.options
        )

    def supports(self, cap: Capability) -> bool:
        return cap in self.capabilities

    def require(self, caps: set[Capability]) -> None:
        missing = sorted(str(c) for c in caps - self.capabilities)
        if missing:
            raise NotSupported(self.engine, ", ".join(missing))

    # --- size of several collections -----------------------------------------
    def size_unit(self, coll: Collection) -> object:
        """What ``coll.size_bytes()`` measures. Collections with equal units
        report the same bytes (one database or file they share, e.g. agdb's
        database per run), so a total counts each unit once. The default:
        each collection measures only its own data. Override this where
        collections share storage."""
        return coll.name

    def size_bytes_of(self, *colls: Collection) -> int:
        """Bytes these collections hold together: the sum over distinct size
        units (``size_unit``), not over collections, so storage they share
        is counted once."""
        return sum(coll.size_bytes() for coll in self.one_per_size_unit(*colls))

    def one_per_size_unit(self, *colls: Collection) -> list[Collection]:
        """The first of these collections in each size unit: what to measure
        or compact once where collections share storage."""
        units: dict[object, Collection] = {}
        for coll in colls:
            units.setdefault(self.size_unit(coll), coll)
        return list(units.values())

    # --- collections -------------------------------------------------------
    def create_collection(
        self, name: str, schema: Schema, index: IndexParams | None = None
    ) -> Collection:
        """Create a new collection; refuses a name that already exists.
        ``index``: the run's index parameters, for an engine that indexes
        as documents arrive (None: the engine's defaults)."""
        if self.has_collection(name):
            raise ForeignDataError(
                f"collection {name!r} already exists in {self.engine} "
                f"({redact_url(self.spec.url) or 'default location'}); storebench "
                "does not write into data it did not create: choose another name"
            )
        coll = self._create(name, schema, self.Index() if index is None else index)
        self._created.add(name)
        return coll

    def open_collection(self, name: str, schema: Schema) -> Collection:
        """Open an existing collection (a client process joining a run)."""
        return self._open(name, schema)

    def _check_owned(self, name: str) -> None:
        if name not in self._created:
            raise ForeignDataError(
                f"refusing to drop {name!r} in {self.engine}: this run did not create it"
            )

    def has_collection(self, name: str) -> bool:
        raise NotImplementedError

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        raise NotImplementedError

    def _open(self, name: str, schema: Schema) -> Collection:
        """The existing collection ``name`` (the store's ``collection``
        class, or the one kept); a ``UserError`` saying where it was looked
        for if none."""
        if name in self._opened:
            return self._opened[name]
        if not self.has_collection(name):
            raise UserError(
                f"no collection {name!r} in {self.location()}", where=f"store {self.engine}"
            )
        coll = self.collection(self, name, schema)
        if self.keeps_open:
            self._opened[name] = coll
        return coll

    def location(self) -> str:
        """Where this store's collections are, for messages (no secrets)."""
        return redact_url(self.spec.url) or "the default location"

    def versions(self) -> dict[str, str]:
        """Engine and client versions, for the result record: with a
        ``client_dist``, its ``engine_version`` and that distribution's
        installed version; else none."""
        if self.client_dist is None:
            return {}
        client = f"{self.client_dist} {metadata.version(self.client_dist)}"
        return {"engine": self.engine_version(), "client": client}

    def engine_version(self) -> str:
        """The engine's name and version (for ``versions``)."""
        raise NotImplementedError

    def topology(self, collections: list[str]) -> dict[str, Any] | None:
        """Optional: the cluster as the engine reports it, read from its own
        API (a managed cluster or one given by URL): ``{"nodes": [name, ...],
        "shards": [{"collection", "shard", "copy": "primary" | "replica",
        "node", "state"}, ...]}`` for ``collections`` (this run's). None (the
        default): the engine has no such notion here."""
        return None

    def engine_stats(self) -> dict[str, dict[str, Any]] | None:
        """Optional: the engine's own cumulative counters per operation, where
        it keeps them and they are cheap to read, as ``{op: {"calls": int,
        "time_s": float, "command": str}}`` with ``op`` one of ``search``,
        ``insert``, ... (the adapter maps its own command names). Workloads
        read them before and after a measured task: the difference is the
        engine's own time per call, recorded beside the driver's latency so
        the client's share is visible. Counters are engine-wide: other
        traffic on an external server is counted too. None (the default):
        the engine reports nothing of the kind."""
        return None

    @classmethod
    def memory_use(
        cls, spec: StoreSpec, index: IndexParams, dim: int, field_bytes: int
    ) -> tuple[int, int]:
        """(bytes per document, fixed bytes) of RAM this engine takes on this
        machine for a spec and index parameters (its ``Index``), for
        documents of a ``dim``-vector (0: none) and about ``field_bytes`` of
        scalar fields: the plan's memory estimate (``storebench.plan.memory``).
        In-process engines count what they keep in this process, a managed
        server what it keeps in its own; a server
        reached by URL counts nothing (it may be elsewhere). Rough by
        design: it is to refuse runs that cannot fit, not to size a
        machine. The default: a store that can run a managed server counts
        its ``managed_memory`` when it does, nothing given a URL (nor does
        one that needs a URL); any other its ``ram``."""
        options = spec.checked_options
        if not isinstance(options, cls.Options):
            options = cls.check_options(spec.options, None)
        if cls.managed_server(options) is None:
            if cls.url_form is not None and cls.url_form.required:
                return 0, 0  # only a server of yours: not counted
            return cls.ram.of(index, dim, field_bytes)
        if spec.url is not None:
            return 0, 0  # a server of yours: not counted
        return cls.managed_memory(options, index, dim, field_bytes)

    @classmethod
    def managed_memory(
        cls, options: Any, index: Any, dim: int, field_bytes: int
    ) -> tuple[int, int]:
        """``memory_use`` of the managed server this store runs on, from its
        checked ``Options`` and ``Index``. The default: its ``ram``, for a
        cluster once per copy of the data and each node's fixed part once
        per node."""
        per_doc, fixed = cls.ram.of(index, dim, field_bytes)
        if isinstance(options, ClusterOptions):
            return per_doc * options.replicas, fixed * options.topology()["nodes"]
        return per_doc, fixed

    # --- where an embedded engine keeps its data ---------------------------------
    def private_dir(self) -> str:
        """A private temporary directory (``storebench-<engine>-*``) for an
        engine given no location; ``close`` removes it."""
        if self._private_dir is None:
            self._private_dir = str(leftovers.make_dir(self.engine))
        return self._private_dir

    def local_path(self, file: str | None = None, *, mkdir: bool = False) -> str:
        """Where an embedded engine keeps its data, also made the spec's url.
        Without a url: ``private_dir()`` (or ``file`` in it). With one: the
        url less any ``<engine>://`` prefix, as an absolute path whose parent
        directory must exist (``mkdir``: the path itself is made a directory)."""
        if self.spec.url is None:
            path = self.private_dir()
            if file is not None:
                path = os.path.join(path, file)
        else:
            path = os.path.abspath(self.spec.url.removeprefix(f"{self.engine}://"))
            parent = os.path.dirname(path)
            if not os.path.isdir(parent):
                raise UserError(
                    f"directory {parent} does not exist", where=f"store {self.engine} url"
                )
            if mkdir:
                os.makedirs(path, exist_ok=True)
        self.spec = self.spec.with_(url=path)
        return path

    def close(self) -> None:
        """Release connections and remove a private directory; the data of
        an external engine stays (``drop`` removes what the run created).
        Adapters close their own handles first. A managed server is not the
        store's: ``stores.opening.OpenStore.close`` stops it after this."""
        # (none before __init__ got that far)
        opened, self._opened = getattr(self, "_opened", {}), {}
        for coll in opened.values():
            coll.close()
        for name in self.handles:
            handle = getattr(self, name, None)
            if handle is not None:
                setattr(self, name, None)
                handle.close()
        if self._private_dir is not None:
            leftovers.remove_dir(self._private_dir)
            self._private_dir = None

    def abandon(self) -> None:
        """What ``close`` does, without waiting on the engine (a second
        signal ends storebench at once): remove the private directory.
        Connections go with the process."""
        if self._private_dir is not None:
            leftovers.remove_dir(self._private_dir)


# --- registry ----------------------------------------------------------------


def engine_names() -> list[str]:
    return STORES.names()


def store_class(engine: str) -> type[Store]:
    cls: type[Store] = STORES.load(engine)
    return cls
