"""Report views and their registry.

A *view* turns the records of one workload into blocks: tables, figures and
short notes. The Markdown and HTML renderers know only blocks, never
workloads, so a workload adds its views without touching them:

```python
from storebench.report.views import Table, ViewInput, register

@register("social", "social_table", "Operations per user kind")
def social_table(v: ViewInput) -> list[Block]:
    ...
```

and adds its module to ``BUILTIN_VIEW_MODULES`` (a plug-in package names its
module under the ``storebench.report_views`` entry-point group instead).
Views registered for ``"*"`` run for every workload. A view with nothing to
show returns ``[]`` and its section is left out.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from storebench.report.data import (
    DEFAULT_AGGREGATION,
    Config,
    Pick,
    Record,
    expand_sweeps,
    group,
    ok_runs,
)
from storebench.results import records

log = logging.getLogger("storebench")

ALL = "*"
ENTRY_POINT_GROUP = "storebench.report_views"
# Modules whose import registers views; each workload that has its own views
# adds one line here (e.g. "storebench.report.social").
BUILTIN_VIEW_MODULES: tuple[str, ...] = (
    "storebench.report.crud",
    "storebench.report.search",
    "storebench.report.cluster",
    "storebench.report.streaming",
    "storebench.report.generic",
    "storebench.report.timeline",
)


# --- blocks ------------------------------------------------------------------------

# a mean above its p95 (a few long stalls carry it): its mark, and the note
# every table holding the mark carries
STALLS = "†"
STALLS_NOTE = f"{STALLS} mean above p95: a few long stalls."


def stalls(mean: float | None, p95: float | None) -> str:
    """``STALLS`` where the mean is above the p95, else nothing."""
    return STALLS if mean is not None and p95 is not None and mean > p95 else ""


def stalls_note(rows: list[list[Any]]) -> str:
    """``STALLS_NOTE`` where a cell of ``rows`` carries the mark."""
    marked = any(str(c).endswith(STALLS) for row in rows for c in row)
    return STALLS_NOTE if marked else ""


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    # "l" or "r" per column; default: first column left, the rest right
    align: list[str] | None = None
    row_classes: list[str] | None = None  # per row, for HTML styling (e.g. a status)

    def __post_init__(self) -> None:
        # a marked mean (above its p95) says what the mark means, in every table
        self.add_note(stalls_note(self.rows))

    def add_note(self, text: str) -> None:
        """``text`` after the note (once; nothing when empty)."""
        if text and text not in self.note:
            self.note = f"{self.note.rstrip('.')}. {text}" if self.note else text

    @classmethod
    def of(cls, title: str, rows: list[dict[str, str]], **kw: Any) -> Table:
        """A table of rows that name their cells' columns (the first row's
        keys, in order; every row has the same): each column's name beside
        its value, once."""
        return cls(title, list(rows[0]) if rows else [], [list(r.values()) for r in rows], **kw)

    def aligns(self) -> list[str]:
        return self.align or ["l"] + ["r"] * (len(self.columns) - 1)


@dataclass
class Figure:
    name: str  # file stem under plots/, unique in a report
    title: str
    svg: str  # inline SVG (no XML prolog, no external references)
    png: bytes
    caption: str = ""


@dataclass
class Text:
    text: str
    pre: bool = False  # preformatted (tracebacks)
    # "note"; "lead": a summary's sentences; "warning": shown as a warning block
    kind: str = "note"


Block = Table | Figure | Text


@dataclass
class Section:
    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    level: int = 2
    # a detail, folded away until opened (HTML <details>: no script); the
    # sections after it of a higher level fold with it
    folded: bool = False


@dataclass
class ViewInput:
    """What a view reads: one workload's records, and which run of each
    configuration its rows show (``how``: ``data.pick``)."""

    workload: str
    records: list[Record]  # every run of the workload, whatever its status
    prefix: str = ""  # for figure names: unique per workload in a report
    how: str = DEFAULT_AGGREGATION
    # the picks a view made (``pick``): what its tables say of repeats
    picked: list[Pick] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.records = records.parse_all(self.records)

    @property
    def ok(self) -> list[Record]:
        """The ok runs, a sweep split per search setting (``expand_sweeps``)."""
        return expand_sweeps(ok_runs(self.records))

    def configs(self, drop: tuple[str, ...] = ()) -> list[Config]:
        """Configurations of the ok runs (repeats together, a sweep per setting)."""
        return group(self.ok, drop)

    def pick(self, c: Config) -> Pick:
        pk = c.pick(self.how)
        self.picked.append(pk)
        return pk

    def name(self, stem: str) -> str:
        return f"{self.prefix or self.workload}-{stem}"


ViewFn = Callable[[ViewInput], list[Block]]


@dataclass(frozen=True)
class View:
    workload: str
    name: str
    title: str
    fn: ViewFn
    needs_plots: bool = False


_REGISTRY: dict[str, list[View]] = {}
_loaded = False


def register(
    workload: str, name: str, title: str, *, needs_plots: bool = False
) -> Callable[[ViewFn], ViewFn]:
    """Register ``fn`` as a view of ``workload`` (``"*"``: of every workload).
    Views show in registration order, a workload's own before the shared ones;
    registering a name again replaces the earlier view."""

    def deco(fn: ViewFn) -> ViewFn:
        views = _REGISTRY.setdefault(workload, [])
        view = View(workload, name, title, fn, needs_plots)
        for i, v in enumerate(views):
            if v.name == name:
                views[i] = view
                break
        else:
            views.append(view)
        return fn

    return deco


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in BUILTIN_VIEW_MODULES:
        importlib.import_module(mod)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # a broken plug-in must not break every report
            log.warning("report views %s: %s", ep.value, exc)


def views_for(workload: str) -> list[View]:
    """A workload's own views, then the shared ones it does not replace (a
    view of its own with a shared view's name takes that view's place)."""
    _load()
    own = _REGISTRY.get(workload, [])
    names = {v.name for v in own}
    return [*own, *(v for v in _REGISTRY.get(ALL, []) if v.name not in names)]


def repeats_note(picks: list[Pick]) -> str:
    """Which run a row's numbers are from, where a configuration ran more
    than once: all of a row is one run's, whichever task ranked it (a row's
    1-client numbers may be its slower repeat's)."""
    rules = distinct([p.describe() for p in picks if p.runs > 1])
    if not rules:
        return ""
    return f"Repeats: every number in a row is one run's (its run column), the {'; '.join(rules)}."


def view_blocks(view: View, v: ViewInput) -> list[Block]:
    """A view's blocks, each table saying which run its rows are from
    (``repeats_note``), for the report and the terminal alike."""
    v.picked = []
    blocks = view.fn(v)
    note = repeats_note(v.picked)
    for b in blocks:
        # a table of one configuration may name its pick already (``tasks``)
        if isinstance(b, Table) and not any(p.describe() in b.note for p in v.picked if p.runs > 1):
            b.add_note(note)
    return blocks


def run_views(
    v: ViewInput, plots: bool = True, step: Callable[[str], None] | None = None
) -> list[Section]:
    """The sections of one workload: a view that fails becomes a note saying
    so (one broken view does not lose the rest of the report). ``step``:
    told each view's title as it starts (progress)."""
    out = []
    for view in views_for(v.workload):
        if view.needs_plots and not plots:
            continue
        if step is not None:
            step(f"{v.workload}: {view.title}")
        try:
            blocks = view_blocks(view, v)
        except Exception as exc:
            log.warning("report view %s failed: %s", view.name, exc, exc_info=True)
            blocks = [Text(f"This view failed: {type(exc).__name__}: {exc}")]
        if blocks:
            out.append(Section(f"{v.prefix or v.workload}-{view.name}", view.title, blocks, 3))
    return out


def distinct(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for x in values:
        if x not in out:
            out.append(x)
    return out
