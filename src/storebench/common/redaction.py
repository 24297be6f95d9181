"""Secrets never leave the process: ``redact`` is the one function every text
storebench writes passes through (result records, reports, the terminal,
logs, error messages and the exceptions of engine clients).

It removes, replacing each with ``***``:

- the password of a URL's user information, ``scheme://user:SECRET@host``
  (the user name stays; a password may hold ``@`` and ``:``);
- the value of a URL query parameter whose name says it is a secret
  (``is_secret_key``: password, pass, pwd, token, api_key, apikey, secret,
  auth, ...; any case): ``?password=SECRET&...``;
- the value of such a keyword in a ``key=value`` string, as in libpq's
  connection strings, bare or quoted: ``password=SECRET``,
  ``password='a \\'b c'``; and the value of such a key in a printed
  mapping (``'password': 'SECRET'``) or an ``Authorization:`` header;
- every value that ``remember`` took from a store URL or option (what the
  forms above hold in each URL storebench was given), and every value of an environment variable whose name
  says it holds a secret (``REDIS_PASSWORD``, ``MILVUS_TOKEN``,
  ``PGPASSWORD``, ``MYSQL_PWD``, ...): wherever they appear, however an
  engine's client echoes them (as given, percent-decoded or -encoded,
  escaped as libpq, ``repr`` or JSON escape a quoted value), also cut short
  at the end of a truncated message. Values shorter than ``MIN_LITERAL`` characters are
  removed only where one of the forms above shows them (they would match
  ordinary words).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
import threading
import traceback
import warnings
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus, urlsplit

MASK = "***"
MIN_LITERAL = 4  # shorter remembered values are removed only by their form
TAIL_MIN = 6  # the shortest start of a secret removed at the end of a cut message

# names: a secret if a part is one of these (sslpassword, PGPASSWORD, client_secret)
_SECRET_PARTS = ("password", "passwd", "passphrase", "secret", "credential", "apikey")
# ... or a word is one of these (MILVUS_TOKEN, MYSQL_PWD, access_token; not tokenizers)
_SECRET_WORDS = frozenset({"pass", "pwd", "pw", "token", "auth", "authorization"})
# ... unless it names where a secret is kept rather than the secret itself
_LOCATION_WORDS = frozenset({"file", "path", "dir", "socket", "sock"})
# environment variables that fit the rule above but hold no secret
_NOT_SECRET_ENV = frozenset({"PWD", "OLDPWD"})
# values that only stand for a secret, as in a message's ``redis://[:password@]host``:
# left as they are (a real secret of these words is none)
_PLACEHOLDERS = frozenset(
    {"password", "pass", "passwd", "pwd", "pw", "secret", "token", "apikey", "api_key"}
)
# keys whose values are encoded measurements, not text (HDR histograms)
_DATA_KEYS = frozenset({"histogram"})


@functools.lru_cache(maxsize=4096)
def is_secret_key(name: str) -> bool:
    """Whether a parameter, option, keyword or environment variable of this
    name holds a secret (password, token, API key, ...)."""
    words = [
        w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", name) if w
    ]  # camelCase, snake_case, kebab-case and UPPER_CASE alike
    if not words or words[-1] in _LOCATION_WORDS:
        return False
    joined = "".join(words)
    return any(p in joined for p in _SECRET_PARTS) or any(w in _SECRET_WORDS for w in words)


# --- the forms, found in any text -----------------------------------------------

_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*://"
# scheme://user:SECRET@ -- the password runs to the last @ before the host
# (strictly: before any / ? #; else, for a password holding a raw /, to the
# last @ before white space)
_USERINFO = re.compile(rf"(?P<head>{_SCHEME}[^\s:/?#]*:)(?:(?P<pw>[^\s/?#]*)@|(?P<loose>[^\s]*)@)")
# ?key=SECRET or &key=SECRET, to the next & or # or white space (less
# punctuation ending a sentence or a clause: a URL's value has it encoded)
_TRAILING = ":,;.)]}'\""
_QUERY = re.compile(r"[?&](?P<key>[^=&#\s?]+)=(?P<val>[^&#\s]*)")
# key=SECRET or key = 'SE\'CRET' (libpq), at the start of a word
_KEYWORD = re.compile(
    r"(?<![^\s,;({\[\"'])(?P<key>[A-Za-z_][\w.\-]*)\s*=\s*"
    r"(?P<val>'(?:[^'\\]|\\.)*(?:'|\Z)|\"(?:[^\"\\]|\\.)*(?:\"|\Z)|\S*)",
    re.S,
)
# 'key': 'SECRET' or "key": "SECRET" (a printed mapping, JSON)
_MAPPING = re.compile(
    r"(?P<q>[\"'])(?P<key>[A-Za-z_][\w.\-]*)(?P=q)\s*:\s*"
    r"(?P<val>'(?:[^'\\]|\\.)*(?:'|\Z)|\"(?:[^\"\\]|\\.)*(?:\"|\Z)|[^\s,}\]]*)",
    re.S,
)
# Authorization: Basic SECRET (an HTTP header, as a client may log it)
_HEADER = re.compile(
    r"(?i)\b(?:proxy-)?authorization\b[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z\-]+\s+)?(?P<val>[^\s\"',}]+)"
)


def _placeholder(value: str) -> bool:
    return value.strip("<>[]{}'\"").lower() in _PLACEHOLDERS or set(value) <= {"*"}


def _spans(text: str) -> list[tuple[int, int]]:
    """Where the forms above hold a secret in ``text`` (start, end)."""
    out: list[tuple[int, int]] = []
    if "://" in text:
        for m in _USERINFO.finditer(text):
            g = "pw" if m.group("pw") is not None else "loose"
            out.append(m.span(g))
    if "=" in text:
        for rx in (_QUERY, _KEYWORD):
            for m in rx.finditer(text):
                val = m.group("val")
                if val[:1] not in ("'", '"'):  # "at ...?password=x: refused": the ":" stays
                    val = val.rstrip(_TRAILING)
                if val and is_secret_key(unquote_plus(m.group("key"))):
                    out.append((m.start("val"), m.start("val") + len(val)))
    if ":" in text:
        for m in _MAPPING.finditer(text):
            if is_secret_key(m.group("key")) and m.group("val"):
                out.append(m.span("val"))
        for m in _HEADER.finditer(text):
            out.append(m.span("val"))
    return [(a, b) for a, b in out if not _placeholder(text[a:b])]


def _unquoted(value: str) -> str:
    """A libpq / printed value without its quotes and backslash escapes."""
    if len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0]:
        return re.sub(r"\\(.)", r"\1", value[1:-1], flags=re.S)
    return value


# --- remembered values ---------------------------------------------------------

_remembered: set[str] = set()
_lock = threading.Lock()


def _variants(value: str) -> set[str]:
    """The forms a value may take in a message: as given, unquoted, percent-
    decoded and -encoded, and escaped the ways messages escape a quoted value
    (libpq, ``repr``, JSON)."""
    out = {value, _unquoted(value)}
    for v in list(out):
        out |= {unquote(v), unquote_plus(v)}
    for v in list(out):
        out |= {
            quote(v, safe=""),
            quote_plus(v, safe=""),
            v.replace("\\", "\\\\").replace("'", "\\'"),
            repr(v)[1:-1],
            json.dumps(v)[1:-1],
            json.dumps(v, ensure_ascii=False)[1:-1],
        }
    return {v for v in out if len(v) >= MIN_LITERAL and not _placeholder(v)}


def secrets_in(text: str | None) -> set[str]:
    """The secret values the forms above hold in ``text`` (a store URL, a
    connection string), in the forms a client may echo them."""
    if not text:
        return set()
    found = {text[a:b] for a, b in _spans(text)}
    if "://" in text:  # the URL as a client parses it (spaces and all)
        try:
            parts = urlsplit(text.strip())
            if parts.password:
                found.add(parts.password)
            found |= {v for k, v in parse_qsl(parts.query) if is_secret_key(k) and v}
        except ValueError:  # not a URL after all (a bad port, a bracket)
            pass
    return {v for f in found for v in _variants(f)}


def remember(*texts: str | None) -> None:
    """Note the secrets in these store URLs or option values, so that
    ``redact`` removes them wherever they appear later in this process."""
    _note(set().union(*(secrets_in(t) for t in texts)))


def remember_value(value: str) -> None:
    """Note ``value`` as a secret as it is (an option whose key says it is one)."""
    _note(_variants(value))


def _note(found: set[str]) -> None:
    if found - _remembered:
        with _lock:
            _remembered.update(found)


@functools.lru_cache(maxsize=16)
def _variants_of(values: tuple[str, ...]) -> frozenset[str]:
    return frozenset(v for value in values for v in _variants(value))


def _known() -> frozenset[str]:
    env = tuple(
        sorted(
            val
            for k, val in os.environ.items()
            if val and k not in _NOT_SECRET_ENV and is_secret_key(k)
        )
    )
    with _lock:
        remembered = frozenset(_remembered)
    return remembered | _variants_of(env)


class _Literals:
    """Known values, compiled: one pattern (longest first, so that a value
    inside a longer one leaves nothing of it) and their starts, for a message
    cut short inside one (``str(exc)[:200]``)."""

    def __init__(self, known: frozenset[str]):
        alts = sorted(known, key=lambda v: (-len(v), v))
        self.pattern = re.compile("|".join(re.escape(v) for v in alts)) if alts else None
        self.starts = {v[:n] for v in known for n in range(TAIL_MIN, len(v))}
        self.longest = max((len(p) for p in self.starts), default=0)

    def sub(self, text: str) -> str:
        if self.pattern is None:
            return text
        text = self.pattern.sub(MASK, text)
        for n in range(min(self.longest, len(text)), TAIL_MIN - 1, -1):
            if text[-n:] in self.starts:
                return text[:-n] + MASK
        return text


_literals = functools.lru_cache(maxsize=16)(_Literals)


class _Snapshot:
    """The values to remove, as known at one moment (one record, one text)."""

    def __init__(self) -> None:
        self.literals = _literals(_known())

    def redact(self, s: str) -> str:
        s = self.literals.sub(s)
        spans = _spans(s)
        if not spans:
            return s
        out, last = [], 0
        for a, b in sorted(spans):
            if b <= last:
                continue
            out += [s[last : max(a, last)], MASK]
            last = b
        out.append(s[last:])
        return "".join(out)

    def redact_obj(self, obj: Any, key: Any = None) -> Any:
        if isinstance(obj, str):
            return obj if key in _DATA_KEYS else self.redact(obj)
        if isinstance(obj, dict):
            return {
                (self.redact(k) if isinstance(k, str) else k): self.redact_obj(v, k)
                for k, v in obj.items()
            }
        if isinstance(obj, list):
            return [self.redact_obj(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact_obj(v) for v in obj)
        return obj


# --- the one function ------------------------------------------------------------


def redact(text: Any) -> str:
    """``text`` (anything; None gives "") with every secret replaced by ``***``."""
    if text is None:
        return ""
    return _Snapshot().redact(text if isinstance(text, str) else str(text))


def redact_obj(obj: Any) -> Any:
    """A copy of a record (nested dicts, lists) with every string, keys
    included, passed through ``redact`` (encoded histograms excepted)."""
    return _Snapshot().redact_obj(obj)


# --- logs, tracebacks, warnings --------------------------------------------------


class LogRedactor(logging.Filter):
    """A logging filter that redacts each record's message, exception and
    stack text (attached to the ``storebench`` logger, and by the CLI to its
    log handler so that every logger's records pass it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format: leave it to the handler to report
            return True
        record.msg, record.args = redact(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = LogRedactor()
logging.getLogger("storebench").addFilter(_FILTER)


def guard_handlers(handlers: Iterable[logging.Handler]) -> None:
    """Redact everything these handlers write, whichever logger it comes from."""
    for h in handlers:
        if _FILTER not in h.filters:
            h.addFilter(_FILTER)


def guard_process() -> None:
    """Redact what Python itself prints to stderr: uncaught exceptions (in
    any thread) and warnings. The CLI calls this first."""

    def excepthook(tp: type[BaseException], exc: BaseException, tb: Any) -> None:
        sys.stderr.write(redact("".join(traceback.format_exception(tp, exc, tb))))

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        text = "".join(
            traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)
        )
        name = args.thread.name if args.thread is not None else "?"
        sys.stderr.write(redact(f"Exception in thread {name}:\n{text}"))

    format_warning = warnings.formatwarning

    def formatwarning(*args: Any, **kwargs: Any) -> str:
        return redact(format_warning(*args, **kwargs))

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    warnings.formatwarning = formatwarning
