"""How a store is configured, checked before a run starts: the URL forms it
accepts (``UrlForm``) and its options (``StoreOptions``, a pydantic model per
store). ``Scenario.plan`` checks both for every store of a scenario, without
connecting to anything; ``Store.__init__`` checks a spec made by hand.

A URL that parses but points nowhere (a refused port, a Redis database the
server does not have) is found only by connecting: the runner reports the
first such failure and skips that store's other runs."""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal
from urllib.parse import SplitResult, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from storebench.common.redaction import redact, remember
from storebench.errors import UserError

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


class SpecError(UserError):
    """A store URL or option refused before the run: ``key`` is where in the
    store's entry (``("url",)``, ``("options", "mode")``), ``message`` the
    text without a place, for the scenario to put its own (file:line, flag)."""

    def __init__(self, message: str, key: tuple[str, ...]):
        self.key = key
        self.message = one_line(redact(message))
        super().__init__(self.message, where="store")


def one_line(text: str, limit: int = 300) -> str:
    """``text`` (a client library's message) on one line, cut at ``limit``."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# --- URLs ------------------------------------------------------------------------


@dataclass(frozen=True)
class UrlForm:
    """The URLs a store accepts. ``check`` refuses any other with one line
    naming the problem and ``shown``; nothing is connected to.

    Checked for every URL: a scheme among ``schemes`` (``scheme://``), a host
    (but for ``hostless`` schemes: a socket path), a port from 1 to 65535 if
    one is given. ``path``: a local path is accepted too (also written
    ``<engine>://path``), whose directory must exist. ``keywords``: libpq's
    forms, a string of ``key=value`` words or a URL (of several hosts, say),
    each left whole to ``parse``. ``parse(url, parts)`` checks what only the
    store knows (a database name, an index number) and returns what the
    adapter connects with; ``parts`` is the split URL (None for a path or a
    string left whole). It raises ``ValueError`` with the problem.
    ``several``: a comma-separated list of URLs, each checked (a list of
    what each makes)."""

    shown: str
    schemes: tuple[str, ...] = ()
    path: bool = False
    keywords: bool = False
    hostless: tuple[str, ...] = ()
    required: bool = False  # no managed server or private directory without one
    several: bool = False  # a comma-separated list of such URLs (a cluster's nodes)
    parse: Callable[[str, SplitResult | None], Any] | None = None

    def is_path(self, engine: str, url: str) -> bool:
        """Whether ``url`` names a local path (as opposed to a server)."""
        m = _SCHEME.match(url)
        return self.path and (m is None or m.group(1) == engine)

    def check(self, engine: str, url: str) -> Any:
        """What ``parse`` makes of ``url`` (the split URL, the path, ...);
        a ``SpecError`` if it is not one of these forms."""
        try:
            return self._check(engine, url)
        except ValueError as exc:
            raise SpecError(
                f"{engine} url {redact(url)!r}: {one_line(str(exc))} (expected {self.shown})",
                ("url",),
            ) from None

    def _check(self, engine: str, url: str) -> Any:
        if not url.strip():
            raise ValueError("empty (leave the url out for the default)")
        if any(ord(c) < 32 or c == "\x7f" for c in url):
            raise ValueError("control characters")
        if self.several and "," in url:
            return [self._check(engine, u) for u in url.split(",")]
        m = _SCHEME.match(url)
        parts: SplitResult | None = None
        if self.is_path(engine, url):
            path = os.path.abspath(url.removeprefix(f"{engine}://"))
            if not os.path.isdir(os.path.dirname(path)):
                raise ValueError(f"directory {os.path.dirname(path)} does not exist")
            url = path
        elif m is not None:
            scheme = m.group(1).lower()
            if scheme not in self.schemes:
                raise ValueError(
                    f"scheme {m.group(1)!r} is not {' or '.join(self.schemes)}"
                    if self.schemes
                    else "a URL, not a path"
                )
            if not self.keywords:
                parts = split(url, scheme not in self.hostless)
        elif not (self.keywords and "=" in url):
            raise ValueError("not a URL")  # (a path went the first way)
        return self.parse(url, parts) if self.parse is not None else (parts or url)


# the forms of embedded stores: where their data goes
FILE = UrlForm("a file path whose directory exists", path=True)
DIRECTORY = UrlForm("a directory path whose parent exists", path=True)


def split(url: str, host: bool = True) -> SplitResult:
    """``url`` split, with its port (if any) a number from 1 to 65535 and,
    if ``host``, a host; else ``ValueError`` naming the problem."""
    parts = urlsplit(url)  # ValueError on a bracket left open, ...
    hostport = parts.netloc.rpartition("@")[2]
    raw = hostport.rpartition("]")[2] if hostport.startswith("[") else hostport
    check_port(raw.partition(":")[2])
    if host and not parts.hostname:
        raise ValueError("no host")
    if parts.hostname and any(c.isspace() for c in parts.hostname):
        raise ValueError(f"host {parts.hostname!r} holds white space")
    return parts


def check_port(port: str) -> None:
    """A port as written in a URL: empty (the default) or 1 to 65535."""
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"port {port!r} is not a number from 1 to 65535")


def check_url(engine: str, form: UrlForm | None, url: str | None) -> Any:
    """``form.check(url)``; a store without a form takes no URL; a store
    whose form is ``required`` needs one."""
    if url is None:
        if form is not None and form.required:
            raise SpecError(
                f"{engine} runs only by URL here (storebench has no server of its own "
                f"to start for it): --store {engine}={form.shown}",
                (),
            )
        return None
    remember(url)  # before any message shows it
    if form is None:
        raise SpecError(f"{engine} takes no url (got {redact(url)!r})", ("url",))
    return form.check(engine, url)


# --- options ---------------------------------------------------------------------


def _takes_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_takes_bool(a) for a in typing.get_args(annotation))


class NoBoolNumbers(BaseModel):
    """A model where a boolean is not a number (pydantic would read
    ``n: true`` as 1)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        f = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and f is not None and not _takes_bool(f.annotation):
            raise PydanticCustomError("bool_not_number", "expected a number, not a boolean")
        return value


class StoreOptions(NoBoolNumbers):
    """A store's options (``StoreSpec.options``), typed. A store declares its
    own subclass as ``Options``; this one has none, so a store that keeps it
    refuses any. Validators may read the store's URL from the validation
    context (``info.context["url"]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # options that configure the server storebench starts: refused with a URL
    managed_only: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def names(cls) -> list[str]:
        return [f.alias or name for name, f in cls.model_fields.items()]


def size_bytes(size: Any) -> int | None:
    """A size as the JVM and most engines write it (``2g``, ``512m``, a
    number of bytes) in bytes; None if it is not one."""
    m = re.fullmatch(r"(\d+)([kmgt]?)b?", str(size).strip().lower()) if size else None
    if m is None:
        return None
    return int(m.group(1)) << (10 * " kmgt".index(m.group(2) or " "))


class ClusterOptions(StoreOptions):
    """The topology of a store that runs as a cluster, as grid axes like any
    option (``--set 'grid.store.replicas=[1,2,4]'``):

    - ``replicas``: copies of the data that serve searches, each on a node of
      its own (Milvus' and Weaviate's meaning; an Elasticsearch index gets
      ``number_of_replicas`` = replicas - 1);
    - ``shards``: parts the data is split into;
    - ``nodes`` (managed only): the nodes storebench starts; the default, as
      many as the replicas need;
    - ``node_cpus`` / ``node_memory`` (managed only): each node's CPU quota in
      cores (0.25: a quarter of one) and memory limit (``2g``), so that a
      cluster of k nodes x c cores fits a small machine
      (``servers.cgroups``; without the permission, the run says so and runs
      unlimited).
    """

    managed_only: ClassVar[tuple[str, ...]] = ("nodes", "node_cpus", "node_memory")
    replicas: PositiveInt = 1
    shards: PositiveInt = 1
    nodes: PositiveInt | None = None
    node_cpus: PositiveFloat | None = None
    node_memory: str | None = None

    @field_validator("node_memory")
    @classmethod
    def _a_size(cls, v: str | None) -> str | None:
        if v is not None and size_bytes(v) is None:
            raise ValueError("not a size (e.g. 512m, 2g)")
        return v

    @model_validator(mode="after")
    def _a_node_per_replica(self) -> ClusterOptions:
        if self.nodes is not None and self.nodes < self.replicas:
            raise ValueError(
                f"replicas={self.replicas} puts each copy on a node of its own: "
                f"it needs nodes >= {self.replicas} (got nodes={self.nodes})"
            )
        return self

    def topology(self) -> dict[str, Any]:
        """How the managed cluster is built (``servers.cluster.build``)."""
        return {
            "nodes": self.nodes or self.replicas,
            "cpus": self.node_cpus,
            "memory_bytes": size_bytes(self.node_memory),
        }


def check_options(
    engine: str, model: type[StoreOptions], options: Mapping[str, Any], url: str | None
) -> StoreOptions:
    """``options`` as ``model``; a ``SpecError`` naming the first bad one."""
    names = model.names()
    unknown = sorted(str(k) for k in options if k not in names)
    if unknown:
        if not names:
            raise SpecError(
                f"store {engine} takes no options (got {unknown[0]!r})", ("options", unknown[0])
            )
        raise SpecError(
            f"unknown option parameter {unknown[0]!r} for store {engine} (known: {', '.join(names)})",
            ("options", unknown[0]),
        )
    try:
        checked = model.model_validate(dict(options), context={"url": url})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(p) for p in err["loc"][:1])  # deeper: a type of a union, a key
        msg = err["msg"].removeprefix("Value error, ")
        if "input" in err and not isinstance(err["input"], dict | list):
            msg = f"{msg} (got {err['input']!r})"
        what = f"option {loc[0]} of {engine}" if loc else f"options of {engine}"
        raise SpecError(f"{what}: {msg}", ("options", *loc)) from None
    if url is not None:
        given = [n for n in model.managed_only if n in checked.model_fields_set]
        if given:
            raise SpecError(
                f"option {given[0]} of {engine} configures the managed server storebench starts; "
                "with a url, set it on your own server",
                ("options", given[0]),
            )
    return checked


class InMemoryMode(StoreOptions):
    """``mode``: ``file`` (the default: the url's, or a private one) or
    ``memory`` (the engine's in-memory database; no url)."""

    mode: Literal["file", "memory"] = "file"

    @model_validator(mode="after")
    def _memory_takes_no_url(self, info: ValidationInfo) -> InMemoryMode:
        if self.mode == "memory" and (info.context or {}).get("url") is not None:
            raise ValueError("an in-memory database (mode: memory) takes no url")
        return self
