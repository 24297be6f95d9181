"""Charts with matplotlib's Agg canvas (no display, no global pyplot state).

Each chart is rendered twice: SVG (text kept as text, so it is searchable and
inlined in the HTML page) and PNG (for the Markdown report). Label text from
records goes through :func:`plain` so a ``$`` in an engine name is never
read as mathtext.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

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


def new_figure(width: float = 7.0, height: float = 4.2, nrows: int = 1, ncols: int = 1) -> Any:
    require()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    fig.subplots(nrows, ncols, squeeze=False)
    return fig


def plain(text: Any) -> str:
    """Label text shown literally (no mathtext)."""
    return str(text).replace("\\", "\\\\").replace("$", r"\$")


_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.S)


def render(fig: Any, name: str, title: str, caption: str = "") -> Figure:
    """SVG and PNG of ``fig``; the SVG is ready to inline in HTML: no XML
    prolog, no DOCTYPE, no metadata, ids salted per figure."""
    import matplotlib

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
    svg = svg.replace("<svg ", f'<svg role="img" aria-label="{_attr(title)}" ', 1)
    return Figure(name, title, svg, png_buf.getvalue(), caption)


def _attr(s: str) -> str:
    import html

    return html.escape(s, quote=True)


def style(i: int) -> dict[str, Any]:
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)]}


def axes(fig: Any) -> list[Any]:
    return list(fig.axes)


def grid_shape(n: int, cols: int = 3) -> tuple[int, int]:
    cols = max(1, min(cols, n))
    return (math.ceil(n / cols), cols)


def hide_unused(fig: Any, used: int) -> None:
    for ax in fig.axes[used:]:
        ax.set_visible(False)


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


def legend(ax: Any, n: int) -> None:
    if n:
        ax.legend(fontsize="small", frameon=False, loc="best")


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
