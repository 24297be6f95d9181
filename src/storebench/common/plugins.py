"""Plug-ins: the stores, workloads and executors an install has, found by
entry-point group, so a package adds one without touching storebench.

One lookup for the three kinds, so a name that is not installed, or a
plug-in whose library is missing, reads the same everywhere."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from storebench.errors import UserError


@dataclass(frozen=True)
class Kind:
    """One kind of plug-in: ``storebench.stores``, ... ."""

    noun: str  # in messages: "store"
    group: str  # the entry-point group
    where: str  # what a lookup's error points at (the scenario key)
    needs: str = "library"  # what a plug-in that fails to import lacks
    builtin: Mapping[str, Any] = field(default_factory=dict)  # no entry point needed

    def entry_points(self) -> dict[str, metadata.EntryPoint]:
        return {ep.name: ep for ep in metadata.entry_points(group=self.group)}

    def names(self) -> list[str]:
        return sorted(set(self.builtin) | set(self.entry_points()))

    def load(self, name: str) -> Any:
        """The plug-in's class; a ``UserError`` listing the known names if
        none has this one, or naming the extra that brings its library."""
        if name in self.builtin:
            return self.builtin[name]
        eps = self.entry_points()
        if name not in eps:
            raise UserError(
                f"unknown {self.noun} {name!r} (known: {', '.join(self.names())})",
                where=self.where,
            )
        try:
            return eps[name].load()
        except ImportError as exc:
            dist = eps[name].dist
            extra = extra_for(name, dist)
            hint = f": pip install '{dist.metadata['Name']}[{extra}]'" if dist and extra else ""
            raise UserError(
                f"{self.noun} {name!r} needs its {self.needs}{hint} ({exc})", where=self.where
            ) from exc


def extra_for(name: str, dist: metadata.Distribution | None) -> str | None:
    """The extra of ``dist`` that installs plug-in ``name``'s library: the
    extra of that name, else of its family (``milvus-lite``: ``milvus``);
    none when the package declares neither (a hint must install something)."""
    extras = set(dist.metadata.get_all("Provides-Extra") or []) if dist else set()
    for candidate in (name, name.split("-")[0]):
        if candidate in extras:
            return candidate
    return None
