"""Charts with matplotlib's Agg canvas (no display, no global pyplot state).

Each chart is rendered twice: SVG (text kept as text, so it is searchable and
inlined in the HTML page) and PNG (for the Markdown report). Label text from
records goes through :func:`plain` so a ``$`` in an engine name is never
read as mathtext.

One piece: every chart shares its styles, axes rules (the recall front's
logit axis, shared y ranges) and rendering, so the report's charts look and
read alike.
"""

from __future__ import annotations

import contextlib
import contextvars
import html
import io
import math
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from storebench.errors import UserError
from storebench.report.views import Figure

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def require() -> Any:
    """matplotlib, or a user error naming the extra to install."""
    try:
        import matplotlib
    except ImportError as exc:
        raise UserError(
            "plots need matplotlib: pip install 'storebench[report]'", where="storebench report"
        ) from exc
    return matplotlib


_SHARE_Y: weakref.WeakSet[Any] = weakref.WeakSet()


def new_figure(
    width: float = 7.0,
    height: float = 4.2,
    nrows: int = 1,
    ncols: int = 1,
    sharey: bool = False,
) -> Any:
    """A figure of ``nrows`` x ``ncols`` panels; ``sharey``: one y range for
    the panels whose values lie together (panels of one figure are read
    side by side), set when it is rendered (:func:`_share_y`)."""
    require()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    fig.subplots(nrows, ncols, squeeze=False)
    if sharey:
        _SHARE_Y.add(fig)
    return fig


SHARED_STRETCH = 2.0  # decades (log axes) a shared range may add to a panel's own


def _share_y(fig: Any) -> str:
    """One y range for a figure's panels, but for those it would stretch by
    more than SHARED_STRETCH (on a log axis, one panel of seconds would
    flatten the others' microseconds): from the panel farthest from the
    others' middle, each such panel keeps its own range (all do when fewer
    than half would share). Returns what the caption says of it."""
    import numpy as np

    axs = [ax for ax in fig.axes if ax.get_visible() and ax.has_data()]
    if len(axs) < 2:
        return ""
    log = all(ax.get_yscale() == "log" for ax in axs)
    f = np.log10 if log else (lambda v: v)
    own = {ax: tuple(float(f(v)) for v in ax.get_ylim()) for ax in axs}
    if not log:  # a linear range: stretch measured against the widest panel's span
        widest = max(hi - lo for lo, hi in own.values()) or 1.0
        own = {ax: (lo / widest, hi / widest) for ax, (lo, hi) in own.items()}
    group = list(axs)
    while len(group) > 1:
        lo, hi = min(own[a][0] for a in group), max(own[a][1] for a in group)
        if all((hi - lo) - (own[a][1] - own[a][0]) <= SHARED_STRETCH for a in group):
            break
        middle = float(np.median([sum(own[a]) / 2 for a in group]))
        group.remove(max(group, key=lambda a: abs(sum(own[a]) / 2 - middle)))
    if 2 * len(group) < len(axs):
        return " Each panel has its own y range (one range would flatten some)."
    limits = (min(a.get_ylim()[0] for a in group), max(a.get_ylim()[1] for a in group))
    for ax in group:
        ax.set_ylim(*limits)
    apart = [ax.get_title() or f"panel {i + 1}" for i, ax in enumerate(axs) if ax not in group]
    if not apart:
        return ""
    return f" Own y range (values far from the other panels'): {', '.join(apart)}."


def plain(text: Any) -> str:
    """Label text shown literally (no mathtext)."""
    return str(text).replace("\\", "\\\\").replace("$", r"\$")


def slug(text: str) -> str:
    """``text`` as a file name and a Markdown link target: letters, digits,
    ``-`` and ``_``; every other run of characters one ``-``."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.S)


def render(fig: Any, name: str, title: str, caption: str = "") -> Figure:
    """SVG and PNG of ``fig``, named ``slug(name)`` (its files' names); the
    SVG is ready to inline in HTML: no XML prolog, no DOCTYPE, no metadata,
    ids salted per figure."""
    import matplotlib

    name = slug(name)
    _labels_inwards(fig)
    if fig in _SHARE_Y:
        caption += _share_y(fig)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
        svg_buf = io.StringIO()
        fig.savefig(
            svg_buf,
            format="svg",
            metadata={"Creator": None, "Date": None, "Format": None, "Type": None},
        )
    png_buf = io.BytesIO()
    fig.savefig(png_buf, format="png", dpi=110, metadata={"Software": None})
    svg = _PROLOG.sub("", svg_buf.getvalue(), count=1)
    svg = svg.replace("<svg ", f'<svg role="img" aria-label="{html.escape(title, quote=True)}" ', 1)
    return Figure(name, title, svg, png_buf.getvalue(), caption)


# --- one style per series, across the whole report ----------------------------------

MAX_SERIES = 8  # per panel: more is a tangle; the rest go to the table beside it


class SeriesStyles:
    """A colour and marker per series name, unique across a report: the
    same series looks the same in every chart, and no two look alike. The
    i-th new name gets colour ``i mod 10`` and marker ``(i div 10 + i) mod
    10``: two names of one colour always differ in marker (100 pairs), and
    beyond that the line style differs too."""

    def __init__(self) -> None:
        self._by: dict[str, dict[str, Any]] = {}

    def __call__(self, name: str) -> dict[str, Any]:
        if name not in self._by:
            i = len(self._by)
            n = len(PALETTE)
            self._by[name] = {
                "color": PALETTE[i % n],
                "marker": MARKERS[(i // n + i) % len(MARKERS)],
                "linestyle": ("-", "-.", ":")[i // (n * len(MARKERS)) % 3],
            }
        return dict(self._by[name])

    def assigned(self) -> dict[str, tuple[str, str, str]]:
        return {k: (v["color"], v["marker"], v["linestyle"]) for k, v in self._by.items()}


_STYLES: contextvars.ContextVar[SeriesStyles | None] = contextvars.ContextVar(
    "storebench_series_styles", default=None
)
RECALL_AXES = ("logit", "linear")
_RECALL_AXIS: contextvars.ContextVar[str] = contextvars.ContextVar(
    "storebench_recall_axis", default="logit"
)


@contextlib.contextmanager
def report_scope(recall_axis: str = "logit") -> Iterator[SeriesStyles]:
    """The charts of one report: one style registry, one recall axis."""
    if recall_axis not in RECALL_AXES:
        raise UserError(f"unknown recall axis {recall_axis!r} (known: {', '.join(RECALL_AXES)})")
    styles = SeriesStyles()
    t1, t2 = _STYLES.set(styles), _RECALL_AXIS.set(recall_axis)
    try:
        yield styles
    finally:
        _STYLES.reset(t1)
        _RECALL_AXIS.reset(t2)


def style(name: str) -> dict[str, Any]:
    """The series ``name``'s colour, marker and line style in this report."""
    styles = _STYLES.get()
    if styles is None:  # a view called outside a report: its own registry
        styles = SeriesStyles()
        _STYLES.set(styles)
    return styles(name)


T = TypeVar("T")


def keep_series(
    items: Sequence[T],
    score: Callable[[T], float],
    n: int = MAX_SERIES,
    group: Callable[[T], str] | None = None,
) -> tuple[list[T], list[T]]:
    """The ``n`` items of highest ``score`` (in their own order) and the
    rest: a panel shows at most ``n`` series, the rest are listed beside it.
    With ``group`` (e.g. the store), the best of each group first, then the
    second best of each...: every store keeps a line while it can."""
    if len(items) <= n:
        return list(items), []
    order = sorted(range(len(items)), key=lambda i: -score(items[i]))
    if group is not None:
        seen: dict[str, int] = {}
        rank = {}
        for i in order:
            g = group(items[i])
            rank[i] = seen.get(g, 0)
            seen[g] = rank[i] + 1
        order = sorted(order, key=lambda i: rank[i])  # stable: by score within a round
    keep = set(order[:n])
    return [x for i, x in enumerate(items) if i in keep], [
        x for i, x in enumerate(items) if i not in keep
    ]


def figure_legend(fig: Any, axs: Sequence[Any]) -> None:
    """One legend below a figure's panels: every series drawn in any panel, once."""
    seen: dict[str, Any] = {}
    for ax in axs:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, h)
    if seen:
        fig.legend(
            list(seen.values()),
            list(seen),
            loc="outside lower center",
            ncols=min(3, len(seen)),
            fontsize="small",
            frameon=False,
        )


def left_out(rest: Sequence[str], why: str) -> str:
    """A caption's note of the series a panel leaves out."""
    if not rest:
        return ""
    return f" {len(rest)} more not drawn ({why}): see the table."


def error_bars(
    ax: Any,
    xs: Sequence[float],
    ys: Sequence[float],
    spans: Sequence[Any],
    color: str,
    axis: str = "y",
) -> None:
    """Bars from min to max over the repeats (``spans``: (lo, hi) or None)."""
    lo = [y - s[0] if s else 0.0 for y, s in zip(ys, spans, strict=True)]
    hi = [s[1] - y if s else 0.0 for y, s in zip(ys, spans, strict=True)]
    if not any(lo) and not any(hi):
        return
    err = [[max(0.0, v) for v in lo], [max(0.0, v) for v in hi]]
    kw = {"yerr": err} if axis == "y" else {"xerr": err}
    ax.errorbar(xs, ys, fmt="none", ecolor=color, elinewidth=0.8, capsize=2, alpha=0.8, **kw)


_POINT_LABELS: weakref.WeakSet[Any] = weakref.WeakSet()


def label_points(ax: Any, pts: Sequence[tuple[float, float, str]], color: str) -> None:
    """Direct labels beside points (a front's settings), in the series'
    colour; turned inwards near the frame's right and top edges when the
    chart is rendered (its limits final): every label inside the axes."""
    for x, y, text in pts:
        if text in ("", "-"):  # nothing to name (a store with one point: the legend does)
            continue
        _POINT_LABELS.add(
            ax.annotate(
                plain(text),
                (x, y),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=6.5,
                color=color,
            )
        )


def _labels_inwards(fig: Any) -> None:
    for ax in fig.axes:
        ax.get_xlim(), ax.get_ylim()  # settles autoscaled limits
        to_axes = ax.transData + ax.transAxes.inverted()
        for t in ax.texts:
            if t not in _POINT_LABELS:
                continue
            fx, fy = to_axes.transform(t.xy)
            dx, dy = t.xyann
            if fx > 0.75:
                t.set_horizontalalignment("right")
                dx = -abs(dx)
            if fy > 0.9:
                t.set_verticalalignment("top")
                dy = -abs(dy)
            t.xyann = (dx, dy)
        _untangle([t for t in ax.texts if t in _POINT_LABELS], ax)


def _untangle(labels: list[Any], ax: Any) -> None:
    """A label that would cover an earlier one moves to the first free
    side of its point (below, left, left and below); if none is free it
    stays where it was."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    placed: list[Any] = []
    for t in labels:
        dx, dy = t.xyann
        ha, va = t.get_horizontalalignment(), t.get_verticalalignment()
        flip_v = {"top": "bottom", "bottom": "top", "baseline": "top"}[va]
        flip_h = {"left": "right", "right": "left", "center": "center"}[ha]
        sides = [
            (dx, dy, ha, va),
            (dx, -dy, ha, flip_v),
            (-dx, dy, flip_h, va),
            (-dx, -dy, flip_h, flip_v),
        ]
        for sdx, sdy, sha, sva in sides:
            t.xyann = (sdx, sdy)
            t.set_horizontalalignment(sha)
            t.set_verticalalignment(sva)
            box = t.get_window_extent(renderer)
            inside = (
                frame.x0 <= box.x0
                and box.x1 <= frame.x1
                and frame.y0 <= box.y0
                and box.y1 <= frame.y1
            )
            if inside and not any(box.overlaps(b) for b in placed):
                break
        else:  # no free side: where it was
            t.xyann = (dx, dy)
            t.set_horizontalalignment(ha)
            t.set_verticalalignment(va)
        placed.append(t.get_window_extent(renderer))


RECALL_FLOOR = 1e-4  # 1 - recall below this goes on linearly: recall 1.0 has a place


def recall_axis_note() -> str:
    """How the recall axis is drawn, for captions."""
    if _RECALL_AXIS.get() == "linear":
        return "linear"
    return "logit-style (0.9, 0.99, 0.999 evenly apart; 1.0 just past 0.9999)"


# recall ticks, the most telling first: each is drawn if far enough from those before it
_RECALL_TICKS = (1.0, 0.9, 0.99, 0.999, 0.5, 0.95, 0.995, 0.0, 0.8, 0.98, 0.9999)
MAX_RECALL_TICKS = 7  # more and their labels run into each other


def _logit(r: Any) -> Any:
    """-log10(1 - recall) (ann-benchmarks), going on linearly (same slope)
    past 1 - RECALL_FLOOR so that 1.0 and the axis end beyond it have a place."""
    import numpy as np

    gap = 1.0 - np.asarray(r, dtype=float)
    top = -math.log10(RECALL_FLOOR)
    linear = top + (RECALL_FLOOR - gap) / (RECALL_FLOOR * math.log(10))
    return np.where(gap >= RECALL_FLOOR, -np.log10(np.maximum(gap, RECALL_FLOOR)), linear)


def _unlogit(y: Any) -> Any:
    import numpy as np

    y = np.asarray(y, dtype=float)
    top = -math.log10(RECALL_FLOOR)
    linear = 1.0 - RECALL_FLOOR + (y - top) * RECALL_FLOOR * math.log(10)
    return np.where(y <= top, 1.0 - 10.0 ** -np.minimum(y, top), linear)


def recall_axis(ax: Any, values: Sequence[float], axis: str = "x") -> None:
    """Recall axis: logit-style (ann-benchmarks: -log10(1 - recall), so 0.9,
    0.99, 0.999 are evenly apart and the top does not pile up), or linear
    (``report --recall-axis linear``). Limits from ``values`` with a margin
    on both sides (a point at recall 1.0 is inside the frame, not on it);
    at most MAX_RECALL_TICKS ticks, evenly enough apart to be read."""
    vals = [v for v in values if v is not None and not math.isnan(v)] or [0.0, 1.0]
    if _RECALL_AXIS.get() == "linear":
        left = max(0.0, min(vals) - max(0.02, (1.0 - min(vals)) * 0.1))
        getattr(ax, f"set_{axis}lim")(left, 1.0 + (1.0 - left) * 0.04)
        return
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    getattr(ax, f"set_{axis}scale")("function", functions=(_logit, _unlogit))
    lo_t, hi_t = float(_logit(min(vals))), float(_logit(max(vals)))
    pad = max(0.15, (hi_t - lo_t) * 0.08)
    hi_t += pad  # at least 1.7 decades: recall 1.0 everywhere still has 0.999 inside
    lo_t = max(0.0, min(lo_t - pad, hi_t - 1.7))
    getattr(ax, f"set_{axis}lim")(float(_unlogit(lo_t)), float(_unlogit(hi_t)))
    ticks: list[float] = []
    gap = (hi_t - lo_t) / MAX_RECALL_TICKS
    for t in _RECALL_TICKS:
        at = float(_logit(t))
        if lo_t <= at <= hi_t and all(abs(at - float(_logit(k))) >= gap for k in ticks):
            ticks.append(t)
    a = getattr(ax, f"{axis}axis")
    a.set_major_locator(FixedLocator(sorted(ticks) or [float(_unlogit(lo_t))]))
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_locator(NullLocator())


def panels(
    n: int, cols: int = 3, size: tuple[float, float] = (4.2, 3.2), extra: float = 0.9
) -> tuple[Any, list[Any]]:
    """A figure of ``n`` panels of ``size`` inches, at most ``cols`` a row
    (``extra``: inches for the titles and legend), one y range for them
    (``new_figure``); the grid's places left over hidden. Returns the figure
    and the ``n`` panels."""
    cols = max(1, min(cols, n))
    rows = math.ceil(n / cols)
    fig = new_figure(size[0] * cols, size[1] * rows + extra, rows, cols, sharey=True)
    for ax in fig.axes[n:]:
        ax.set_visible(False)
    return fig, fig.axes[:n]


def log_axis(ax: Any, axis: str, fmt: Any) -> None:
    """Log scale with ticks at 1, 2 and 5 of each decade, labelled by ``fmt``
    (no scientific notation, no mathtext)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    getattr(ax, f"set_{axis}scale")("log")
    a = getattr(ax, f"{axis}axis")
    a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    a.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    a.set_minor_formatter(NullFormatter())


def fmt_ns_axis(ax: Any, axis: str = "y") -> None:
    """Latency axis: log scale with time units on the ticks."""
    from storebench.report.terminal import fmt_ns

    log_axis(ax, axis, fmt_ns)


def fmt_count(v: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:g}{unit}"
    return f"{v:g}"


def rate_axis(ax: Any, axis: str = "y") -> None:
    """Throughput axis: log scale, ticks like 200, 5k, 1.2M."""
    log_axis(ax, axis, fmt_count)


def doubling_axes(
    lat_ax: Any, qps_ax: Any, xlabel: str, lat_title: str, legend_ax: Any, xs: Sequence[float]
) -> None:
    """A latency and a QPS panel over a doubling x (data size, nodes): log2
    x ticked at ``xs``, log y with units, titles, the legend below ``legend_ax``."""
    ticks = sorted(set(xs))
    for ax in (lat_ax, qps_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [fmt_count(x) for x in ticks])
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.grid(True, which="both", alpha=0.3)
    fmt_ns_axis(lat_ax, "y")
    lat_ax.set_title(lat_title, fontsize="medium")
    rate_axis(qps_ax, "y")
    qps_ax.set_title("QPS", fontsize="medium")
    legend(legend_ax, len(legend_ax.get_legend_handles_labels()[1]))


def legend(ax: Any, n: int) -> None:
    """A legend that never covers data: below the panel."""
    if n:
        ax.legend(
            fontsize="small",
            frameon=False,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.18),
            ncols=min(3, n),
        )


def line(ax: Any, series: str, xs: Sequence[Any], ys: Sequence[Any], **kw: Any) -> None:
    """The series' line in its colour, marker and line style, labelled
    with its name shortened (``kw``: any of them otherwise, or more)."""
    st = style(series)
    ax.plot(
        xs,
        ys,
        **{"color": st["color"], "marker": st["marker"], "ls": st["linestyle"]}
        | {"label": short([series])[0]}
        | kw,
    )


def latency_lines(
    ax: Any, series: str, pts: Sequence[tuple[Any, float, float, float]], alpha: float
) -> None:
    """One series of latency against throughput: ``pts`` are (clients, x,
    y of the solid line, y of the dashed one), each point labelled with its
    clients on the solid line."""
    xs = [x for _, x, _, _ in pts]
    line(ax, series, xs, [y for *_, y, _ in pts], ls="-")
    line(ax, series, xs, [y for *_, y in pts], ls="--", alpha=alpha, label=None)
    for clients, x, y, _ in pts:
        ax.annotate(f"{clients}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)


def pareto_series(
    ax: Any, pts: Sequence[tuple[float, float, Any, str]], series: str, **scatter: Any
) -> None:
    """One series' points (x, y, y's spread over the repeats (a
    ``data.Spread`` or None), label) with min-max bars (``scatter``: their
    marker options), its Pareto front as a staircase and the front's points
    labelled."""
    st = style(series)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    ax.scatter(xs, ys, color=st["color"], **scatter)
    spans = [(s.min, s.max) if s is not None and s.n > 1 else None for _, _, s, _ in pts]
    error_bars(ax, xs, ys, spans, st["color"])
    names = {(x, y): name for x, y, _, name in pts}
    front = pareto_front(zip(xs, ys, strict=True))
    ax.plot(
        [x for x, _ in front],
        [y for _, y in front],
        drawstyle="steps-post",
        color=st["color"],
        marker=st["marker"],
        ls=st["linestyle"],
        label=plain(series),
    )
    label_points(ax, [(x, y, names.get((x, y), "")) for x, y in front], st["color"])


def pareto_front(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both axes (higher x and higher y are
    better), by ascending x: the upper-right staircase."""
    pts = sorted(set(points), key=lambda p: (-p[0], -p[1]))
    front: list[tuple[float, float]] = []
    best_y = -math.inf
    for x, y in pts:
        if y > best_y:
            front.append((x, y))
            best_y = y
    return sorted(front)


def percentile_curve(h: Any, points: int = 64, max_nines: float = 5.0) -> tuple[list, list]:
    """(x, latency) for the classic HDR percentile plot: x = -log10(1 - q),
    so 1 is the 90th, 2 the 99th, 3 the 99.9th percentile."""
    n = h.count
    top = min(max_nines, math.log10(n)) if n > 1 else 0.0
    xs = [top * i / (points - 1) for i in range(points)] if top > 0 else [0.0]
    from storebench.report.data import percentiles

    ys = percentiles(h, [100.0 * (1.0 - 10.0**-x) for x in xs])
    return xs, ys


def nines_axis(ax: Any, top: float) -> None:
    ticks = [t for t in range(0, int(math.floor(top)) + 1)]
    labels = {0: "p0", 1: "p90", 2: "p99", 3: "p99.9", 4: "p99.99", 5: "p99.999"}
    ax.set_xticks(ticks, [labels.get(t, f"{t}") for t in ticks])
    ax.set_xlim(0, max(top, 1.0))


def short(labels: Sequence[str], width: int = 40) -> list[str]:
    return [plain(s if len(s) <= width else s[: width - 1] + "…") for s in labels]
