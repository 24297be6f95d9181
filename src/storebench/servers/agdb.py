"""A managed agdb server (``agdb_server``, the crate from crates.io), and a
small typed client for its HTTP JSON API.

The server binary is built once with cargo (about 8 minutes on 2 cores) into a
cache and found there afterwards::

    python -m storebench.servers.agdb --install     # no-op when already built

It is looked for at ``$AGDB_SERVER_BIN``, ``$STOREBENCH_DATA/agdb/bin``,
``~/.cache/storebench/agdb/bin`` (``$XDG_CACHE_HOME``), and on ``PATH``.

The server reads ``agdb_server.yaml`` from its working directory; without
one it binds every interface (``:::3000``) and writes a default file there.
So the file is written first, in the private directory (the working
directory of the process): ``bind: 127.0.0.1:PORT``, ``address``, ``admin``,
``data_dir`` (inside the private directory), a random cluster token, and the
log level (``warn`` by default: at ``info`` the server logs a line per
request). The server has no CLI flags (even ``--help`` starts it).

Credentials: agdb creates its admin with the password equal to the admin's
name. Here the admin's name is random, and at start-up the admin's password is
changed to another random one, then a ``storebench`` user is created with its
own random password; the store talks to the server as that user (the URL
carries it; records redact it). The admin credentials stay in this object.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar, TypedDict
from urllib.parse import quote, urlsplit

from storebench.common.retry import NETWORK, cause, run_retrying
from storebench.errors import StorebenchError, UserError
from storebench.servers.base import Server, ServerError
from storebench.servers.cache import engine_cache, install_main

AGDB_VERSION = "~0.16.0"  # the cargo version requirement (the study's 0.16)
BINARY = "agdb_server"
USER = "storebench"
API = "/api/v1"
LOG_LEVELS = ("off", "error", "warn", "info", "debug", "trace")


# --- the binary ----------------------------------------------------------------


def install_root() -> Path:
    """Where ``--install`` puts the server (``<root>/bin/agdb_server``)."""
    return engine_cache("agdb")


def _candidates() -> list[Path]:
    out: list[Path] = []
    if os.environ.get("AGDB_SERVER_BIN"):
        out.append(Path(os.environ["AGDB_SERVER_BIN"]).expanduser())
    out.append(install_root() / "bin" / BINARY)
    home_cache = Path(os.path.expanduser("~")) / ".cache" / "storebench" / "agdb" / "bin" / BINARY
    if home_cache not in out:
        out.append(home_cache)
    on_path = shutil.which(BINARY)
    if on_path:
        out.append(Path(on_path))
    return out


def find_binary() -> Path | None:
    for p in _candidates():
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def require_binary() -> Path:
    found = find_binary()
    if found is None:
        looked = ", ".join(str(p) for p in _candidates())
        raise ServerError(
            f"agdb: no {BINARY} binary (looked at {looked}); build it once with "
            "`python -m storebench.servers.agdb --install` (cargo, about 8 minutes)"
        )
    return found


def _cargo() -> str:
    found = shutil.which("cargo")
    if found:
        return found
    home = Path(os.path.expanduser("~")) / ".cargo" / "bin" / "cargo"
    if home.is_file():
        return str(home)
    raise ServerError(
        "agdb: building agdb_server needs cargo (a Rust toolchain with edition 2024, "
        "Rust >= 1.85: https://rustup.rs); Debian's packaged cargo is too old"
    )


def install(root: Path | None = None, quiet: bool = False) -> Path:
    """Build agdb_server with cargo into ``root`` unless it is found already."""
    found = find_binary()
    if found is not None:
        return found
    root = root or install_root()
    root.mkdir(parents=True, exist_ok=True)
    cargo = _cargo()
    base = [cargo, "install", "--root", str(root), BINARY, "--version", AGDB_VERSION]

    def log(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    # --locked: the crate's own Cargo.lock (what its release was tested with);
    # a download that fails is tried again, a build that fails is not
    r = run_retrying(
        [*base[:2], "--locked", *base[2:]], "cargo install agdb_server", transient=NETWORK, log=log
    )
    if r.returncode != 0 and not NETWORK.search(r.stdout + r.stderr):
        r = run_retrying(base, "cargo install agdb_server (unlocked)", transient=NETWORK, log=log)
    binary = root / "bin" / BINARY
    if r.returncode != 0 or not binary.is_file():
        raise ServerError(
            f"agdb: cargo install {BINARY} failed (exit {r.returncode}): {cause(r.stdout + r.stderr, 10)}"
        )
    return binary


# --- the HTTP JSON client ------------------------------------------------------


class AgdbError(StorebenchError):
    """The server answered with an error status."""

    def __init__(self, status: int, message: str, what: str):
        self.status = status
        self.message = message
        super().__init__(f"agdb {what}: {status} {message}")


class KeyValue(TypedDict):
    key: dict[str, Any]
    value: dict[str, Any]


DbElement = TypedDict("DbElement", {"id": int, "from": int, "to": int, "values": list[KeyValue]})


class QueryResult(TypedDict):
    result: int
    elements: list[DbElement]


class ServerDatabase(TypedDict):
    db: str
    owner: str
    db_type: str
    role: str
    size: int
    backup: int
    created: int


Query = dict[str, Any]  # one QueryType: {"Search": {...}}, {"InsertNodes": {...}}, ...


class AgdbApi:
    """The agdb server's HTTP JSON API (the subset storebench uses).

    One persistent connection per thread (``http.client``, keep-alive), one
    login token shared by the threads; an expired token is renewed once.
    Read-only requests are retried once on a connection the server closed;
    writes never are (a retried write could apply twice)."""

    def __init__(
        self, url: str, username: str, password: str, timeout: float = 600.0, login: bool = True
    ):
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise UserError(
                f"expected http://user:password@host:port, got {parts.scheme}://{parts.hostname}",
                where="store agdb url",
            )
        self.host = parts.hostname
        self.port = parts.port or 3000
        self.basepath = parts.path.rstrip("/")
        self.username = username
        self._password = password
        self.timeout = timeout
        self.token: str | None = None
        self._local = threading.local()
        self._conns: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        if login:
            self.login()

    def __repr__(self) -> str:  # no password, no token
        return f"AgdbApi({self.username}@{self.host}:{self.port})"

    # --- transport -----------------------------------------------------------
    def _conn(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def _drop_conn(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)

    def _send(
        self, method: str, path: str, body: bytes | None, auth: bool, idempotent: bool
    ) -> tuple[int, bytes]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if auth and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in (0, 1):
            conn = self._conn()
            try:
                conn.request(method, self.basepath + API + path, body=body, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop_conn()
                if attempt or not idempotent:
                    raise
            except BaseException:
                self._drop_conn()  # a half-read response must not poison the next call
                raise
        raise AssertionError("unreachable")

    def request(
        self,
        method: str,
        path: str,
        payload: Any = None,
        auth: bool = True,
        idempotent: bool = False,
        what: str | None = None,
    ) -> Any:
        body = None if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        status, data = self._send(method, path, body, auth, idempotent)
        if status == 401 and auth and self._password:
            self.login()  # the token expired (token_expiry_seconds)
            status, data = self._send(method, path, body, auth, idempotent)
        if status >= 300:
            raise AgdbError(status, data.decode("utf-8", "replace").strip(), what or path)
        if not data:
            return None
        return json.loads(data)

    def close(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
        self._local = threading.local()

    # --- endpoints -------------------------------------------------------------
    def status(self) -> bool:
        status, _ = self._send("GET", "/status", None, auth=False, idempotent=True)
        return status == 200

    def version(self) -> str:
        doc = self.request("GET", "/openapi.json", auth=False, idempotent=True)
        return str(doc.get("info", {}).get("version", "?"))

    def login(self) -> None:
        token = self.request(
            "POST",
            "/user/login",
            {"username": self.username, "password": self._password},
            auth=False,
            idempotent=True,
            what=f"login as {self.username}",
        )
        self.token = str(token)

    def change_password(self, new_password: str) -> None:
        self.request(
            "PUT",
            "/user/change_password",
            {"password": self._password, "new_password": new_password},
            what="change password",
        )
        self._password = new_password
        self.login()

    def admin_user_add(self, username: str, password: str) -> None:
        self.request("POST", f"/admin/user/{quote(username, safe='')}/add", {"password": password})

    def db_list(self) -> list[ServerDatabase]:
        return list(self.request("GET", "/db/list", idempotent=True))

    def db_add(self, owner: str, db: str, db_type: str) -> None:
        self.request("POST", f"{_db_path(owner, db)}/add?db_type={quote(db_type)}")

    def db_delete(self, owner: str, db: str) -> None:
        self.request("DELETE", f"{_db_path(owner, db)}/delete")

    def exec(self, owner: str, db: str, queries: list[Query]) -> list[QueryResult]:
        """Read-only queries, run in one read transaction (results in order;
        a query may use an earlier one's result as ``{"Alias": ":N"}``)."""
        return list(self.request("POST", f"{_db_path(owner, db)}/exec", queries, idempotent=True))

    def exec_mut(self, owner: str, db: str, queries: list[Query]) -> list[QueryResult]:
        """Queries in one write transaction: all apply or none."""
        return list(self.request("POST", f"{_db_path(owner, db)}/exec_mut", queries))

    def optimize(self, owner: str, db: str, shrink_to_fit: bool = False) -> ServerDatabase:
        q = "?shrink_to_fit=true" if shrink_to_fit else ""
        return dict(self.request("POST", f"{_db_path(owner, db)}/optimize{q}"))  # type: ignore[return-value]


def _db_path(owner: str, db: str) -> str:
    return f"/db/{quote(owner, safe='')}/{quote(db, safe='')}"


# --- the managed server ----------------------------------------------------------


class AgdbServer(Server):
    name = "agdb"
    start_timeout_s: ClassVar[float] = 60.0

    def __init__(
        self,
        log_level: str = "warn",
        sync_mode: str | None = None,
        request_body_limit: int = 1 << 30,
    ):
        if log_level not in LOG_LEVELS:
            raise UserError(
                f"unknown log_level {log_level!r} (use {', '.join(LOG_LEVELS)})",
                where="store agdb",
            )
        if sync_mode not in (None, "none", "commit"):
            raise UserError(
                f"unknown sync_mode {sync_mode!r} (use none or commit)", where="store agdb"
            )
        self.binary = require_binary()  # before the directory exists: nothing to clean up
        super().__init__()
        self.log_level = log_level
        self.sync_mode = sync_mode
        self.request_body_limit = request_body_limit
        # agdb's admin starts with password == name: a random name keeps even
        # that first password secret; it is replaced at start-up anyway
        self._admin = "sbadmin" + secrets.token_hex(12)
        self._admin_password = secrets.token_urlsafe(24)
        self.password = secrets.token_urlsafe(24)
        self.config_path = self.dir / "agdb_server.yaml"

    def prepare(self) -> None:
        settings = {
            "bind": f"127.0.0.1:{self.port}",
            "address": f"http://127.0.0.1:{self.port}",
            "admin": self._admin,
            "data_dir": str(self.dir / "data"),
            "log_level": self.log_level,
            "request_body_limit": str(self.request_body_limit),
            "cluster_token": secrets.token_hex(16),
        }
        if self.sync_mode is not None:
            settings["sync_mode"] = self.sync_mode
        self.config_path.touch(mode=0o600)
        self.config_path.write_text(
            "# written by storebench (see storebench/servers/agdb.py)\n"
            + "".join(f"{k}: {v}\n" for k, v in settings.items())
        )

    def running_settings(self) -> dict[str, str]:
        """What its configuration file says of durability and requests
        (the server has no API to read them back)."""
        return {
            "sync_mode": self.sync_mode or "(default)",
            "log_level": self.log_level,
            "request_body_limit": str(self.request_body_limit),
        }

    def command(self) -> list[str]:
        return [str(self.binary)]  # reads ./agdb_server.yaml (cwd = the private directory)

    def _api(self, username: str, password: str, login: bool = True) -> AgdbApi:
        return AgdbApi(f"http://127.0.0.1:{self.port}", username, password, 30.0, login)

    def ready(self) -> bool:
        api = self._api("", "", login=False)
        try:
            return api.status()
        finally:
            api.close()

    def start(self) -> AgdbServer:
        super().start()
        try:
            self._bootstrap()
        except BaseException:
            self.stop()
            raise
        return self

    def _bootstrap(self) -> None:
        admin = self._api(self._admin, self._admin)  # the initial password is the name
        try:
            admin.change_password(self._admin_password)
            admin.admin_user_add(USER, self.password)
        finally:
            admin.close()

    def version(self) -> str:
        api = self._api("", "", login=False)
        try:
            return f"agdb_server {api.version()}"
        finally:
            api.close()

    @property
    def url(self) -> str:
        return f"http://{USER}:{quote(self.password, safe='')}@127.0.0.1:{self.port}"


def main(argv: list[str] | None = None) -> int:
    return install_main(
        "storebench.servers.agdb",
        f"build agdb_server {AGDB_VERSION} with cargo into {install_root()}",
        lambda: f"agdb_server: {install()}",
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
