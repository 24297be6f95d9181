"""Redis's store: the client and the write path's own connections, the
search module checked, collections as indexes and their own keys, the
managed Redis it declares."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from importlib import metadata
from typing import Any, Literal
from urllib.parse import SplitResult

import redis
import redis.connection
from redis.backoff import NoBackoff
from redis.retry import Retry

from storebench.data.batch import Schema
from storebench.errors import UserError
from storebench.stores.base import Capability, Collection, RamUse, Store, StoreSpec, redact_url
from storebench.stores.config import StoreOptions, UrlForm
from storebench.stores.params import HnswIndex, HnswSearch
from storebench.stores.vector.redis.collection import RedisCollection

_pack_command: Callable[[tuple[Any, ...]], bytes] | None
try:  # the redis extra brings hiredis: commands packed in C, as redis-py does with it
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover - redis-py packs them
    _pack_command = None


def _redis_url(url: str, parts: SplitResult | None) -> SplitResult | None:
    """The URL as redis-py reads it; a path it would ignore is refused."""
    redis.connection.parse_url(url)  # ValueError on a query value it cannot read
    if parts is not None and parts.scheme == "unix":
        if not parts.path:
            raise ValueError("no socket path")
    elif parts is not None:
        db = parts.path.removeprefix("/")
        if db and not (db.isascii() and db.isdigit()):
            raise ValueError(f"the path is a database number, not {db!r}")
    return parts


def connect_options(url: str) -> dict[str, Any]:
    """redis-py's options for a store's client of the server at ``url``."""
    kw: dict[str, Any] = {
        # no silent retries: a benchmark reports a failed call, and a dead
        # server fails the run at once instead of after backoffs
        "retry": Retry(NoBackoff(), 0),
        # one connection per concurrent client thread (social runs 221);
        # redis-py 8's pool refuses a 101st by default
        "max_connections": 100_000,
    }
    if "@" not in url and os.environ.get("REDIS_PASSWORD"):
        kw["password"] = os.environ["REDIS_PASSWORD"]
    return kw


def module_versions(reply: list[Any]) -> dict[str, str]:
    """MODULE LIST's reply (a dict, or a flat [key, value, ...] list, per
    module) as each module's name and version (21005 -> "2.10.5")."""
    out = {}
    for m in reply:
        items = m.items() if isinstance(m, dict) else zip(m[::2], m[1::2], strict=True)
        d = {k.decode() if isinstance(k, bytes) else k: v for k, v in items}
        name, v = d.get("name", ""), int(d.get("ver", 0))
        out[name.decode() if isinstance(name, bytes) else str(name)] = (
            f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        )
    return out


# also FalkorDB's (a Redis server with a module)
REDIS_URL = UrlForm(
    "redis://[:password@]host:port/db",
    schemes=("redis", "rediss", "unix"),
    hostless=("unix",),
    parse=_redis_url,
)


class RedisStore(Store):
    async_ops = "native"
    engine = "redis"
    capabilities = frozenset(Capability) - {Capability.COMPACT}
    Index = HnswIndex
    Search = HnswSearch
    extra = "redis"
    url_form = REDIS_URL
    # the managed Redis keeps the hashes and the vector index in RAM
    ram = RamUse(overhead=256, hnsw_m=16, fixed_mib=16)
    handles = ("client",)
    server = "redis:RedisServer"

    class Options(StoreOptions):
        managed_only = ("persistence", "server_args")
        persistence: Literal["none", "rdb", "aof"] = "none"
        server_args: list[str | int | float] = []

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self.ef: int | None = None  # EF_RUNTIME (set_search_params); None: the engine's
        self._algorithm: dict[str, str] = {}
        self._built_with: dict[str, HnswIndex] = {}  # each index's parameters, as created
        # the write path's own connections (``_send``): made on demand, one
        # per concurrent writer, reused through a free list
        self._writers: list[redis.Connection] = []
        self._spare: list[redis.Connection] = []
        self._connect()

    def _send(self, commands: list[list[Any]]) -> None:
        """Sends ``commands`` on one connection, every one before reading any
        reply (a pipeline without MULTI), then reads all the replies and
        raises the first error among them (having read them all, the
        connection stays in step). The connection comes off the store's
        free list and goes back after (list pop/append: atomic), not the
        pool's checkout with a pipeline object around it: that made a
        one-HSET insert cost 1.7x the client CPU (29 us, now 17, most of it
        the socket calls). A connection that failed mid-way is closed and
        reconnects on its next use."""
        if not commands:
            return
        try:
            conn = self._spare.pop()
        except IndexError:
            pool = self.client.connection_pool
            conn = pool.connection_class(**pool.connection_kwargs)
            self._writers.append(conn)
        error: redis.ResponseError | None = None
        try:
            if _pack_command is not None:  # what redis-py's packer calls, less its checks
                packed = [b"".join([_pack_command(tuple(c)) for c in commands])]
            else:
                packed = conn.pack_commands(commands)
            conn.send_packed_command(packed, False)
            for _ in commands:
                try:
                    conn.read_response()
                except redis.ResponseError as exc:
                    error = error or exc
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self._spare.append(conn)
        if error is not None:
            raise error

    def _connect(self) -> None:
        """``client``, on a server with the search module (``close`` closes it)."""
        url = self.spec.url or ""
        # protocol 2: the reply shapes parsed here
        client = self.client = redis.Redis.from_url(url, protocol=2, **connect_options(url))
        try:
            client.ping()
            modules = client.execute_command("MODULE", "LIST")
        except redis.RedisError as exc:
            raise UserError(
                f"cannot reach Redis at {redact_url(url)}: {exc}", where="store redis"
            ) from exc
        self._modules = module_versions(modules)
        if not {name.lower() for name in self._modules} & {"search", "ft"}:
            raise UserError(
                f"Redis at {redact_url(url)} has no search module (RediSearch)",
                where="store redis",
            )

    # --- own keys only ----------------------------------------------------------
    def _own_keys(self, prefix: str, batch: int = 1000) -> Any:
        """Keys ``<prefix><integer>`` (this collection's documents), in batches.

        The glob is escaped and every key re-checked, so another collection
        whose name starts with this one's never matches."""
        glob = re.sub(r"([\\*?\[\]])", r"\\\1", prefix) + "*"
        own = re.compile(re.escape(prefix.encode()) + rb"-?[0-9]+\Z")
        chunk: list[bytes] = []
        for key in self.client.scan_iter(match=glob, count=batch):
            if own.match(key):
                chunk.append(key)
                if len(chunk) >= batch:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk

    def _drop_own(self, name: str, prefix: str) -> None:
        if name.encode() in self._indexes():
            self.client.execute_command("FT.DROPINDEX", name)
        for keys in self._own_keys(prefix):
            self.client.execute_command("UNLINK", *keys)
        self._algorithm.pop(name, None)
        self._built_with.pop(name, None)

    def _indexes(self) -> set[bytes]:
        return set(self.client.execute_command("FT._LIST"))

    # --- collections ---------------------------------------------------------------
    def has_collection(self, name: str) -> bool:
        if name.encode() in self._indexes():
            return True
        return next(iter(self._own_keys(f"{name}:")), None) is not None

    def _create(self, name: str, schema: Schema, index: HnswIndex) -> Collection:
        """With index parameters, the HNSW index they make, loaded as the
        documents arrive; without, FLAT (exact) until ``build_index``."""
        coll = RedisCollection(self, name, schema)
        if index.given():
            coll._create_index("HNSW", index)
        else:
            coll._create_index("FLAT", HnswIndex())
        return coll

    def _open(self, name: str, schema: Schema) -> Collection:
        if name.encode() not in self._indexes():
            raise UserError(
                f"no index {name!r} in {redact_url(self.spec.url)}", where="store redis"
            )
        coll = RedisCollection(self, name, schema)
        info = coll._info()
        for attr in info.get("attributes", []):
            if b"VECTOR" in attr:  # a flat list with value-less flags: look, don't pair
                self._algorithm[name] = "HNSW" if b"HNSW" in attr else "FLAT"
        return coll

    def engine_stats(self) -> dict[str, dict[str, Any]] | None:
        """``INFO commandstats``: calls and microseconds the server itself
        spent per command (FT.SEARCH for searches, HSET for writes). The
        search module runs queries on the main thread here (no WORKERS), so
        the time is the whole query's."""
        stats = self.client.info("commandstats")
        out: dict[str, dict[str, Any]] = {}
        for op, cmd in (("search", "FT.SEARCH"), ("write", "HSET")):
            s = stats.get(f"cmdstat_{cmd}")
            if s:
                out[op] = {"calls": int(s["calls"]), "time_s": s["usec"] / 1e6, "command": cmd}
        return out

    def versions(self) -> dict[str, str]:
        info = self.client.info("server")
        search = self._modules.get("search", "?")
        return {
            "engine": f"Redis {info.get('redis_version', '?')} + RediSearch {search}",
            "client": f"redis-py {metadata.version('redis')}",
        }

    def close(self) -> None:
        for conn in getattr(self, "_writers", ()):
            conn.disconnect()
        super().close()
