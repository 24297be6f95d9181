"""Error types. Every error a user can cause is a ``UserError``: the CLI prints
its one-line message and exits with status 2, writing nothing half-done."""

from __future__ import annotations

from storebench.common.redaction import redact


class StorebenchError(Exception):
    """Base of all storebench errors. Its message holds no secret (a store
    URL's password, ...): it is redacted as the error is made."""

    def __init__(self, *args: object):
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


# what str.splitlines() breaks at: shown escaped, so a message stays one line
_LINE_BREAKS = {c: repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}
_ONE_LINE = str.maketrans(_LINE_BREAKS)


def one_line(text: str) -> str:
    """``text`` with its line breaks escaped (a key or path holding one)."""
    return text.translate(_ONE_LINE)


class UserError(StorebenchError):
    """Bad input: wrong config, unknown store, missing or corrupt file.

    ``where`` names the place (file:line, key, URL) so the message is one line
    that says what and where (line breaks in either are shown escaped)."""

    def __init__(self, message: str, where: str | None = None):
        self.where = None if where is None else one_line(redact(where))
        message = one_line(str(message))
        super().__init__(f"{one_line(where)}: {message}" if where else message)


class NotSupported(StorebenchError):
    """An operation the engine does not declare among its capabilities."""

    def __init__(self, engine: str, capability: str):
        self.engine = engine
        self.capability = capability
        super().__init__(f"{capability} is not supported by {engine}")


class ForeignDataError(StorebenchError):
    """Refusal to touch data that storebench did not create."""


class NotCounted(Exception):  # noqa: N818 (not an error: a signal to the driver)
    """Raised by an operation that found nothing to do (a read before any
    write): the driver neither times nor counts it as done, and records it
    under ``skipped`` by its message."""


class TaskFailed(StorebenchError):
    """A measured task ended early because operations failed."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C so the same clean-up runs."""


def signal_name(exc: BaseException) -> str:
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
