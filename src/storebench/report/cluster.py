"""Views of a cluster's topology as an axis (the Milvus evaluation's
replicas and scale-out figures): QPS and mean/p99 latency per configuration
of nodes, replicas and shards, the CPU each node used against its quota, and
what limited the run: the nodes' quotas, or the machine (the quotas add up
to its cores, or the machine was busy).

A view of the search workloads (search, tune, scale): it shows when runs
differ in their topology, or a run's cluster had more than one node."""

from __future__ import annotations

from typing import Any

from storebench.report import plots
from storebench.report.data import Config, Record, aggregation_note, clients_text
from storebench.report.search import WORKLOADS, Point, families, lat, qps
from storebench.report.views import Block, Table, Text, ViewInput, register

AXES = ("replicas", "nodes", "shards", "node_cpus")
BUSY = 0.9  # a machine whose cores were this busy was the limit


def nodes_of(run: Record) -> int:
    """Nodes as the cluster reported them, else as asked (one: a single server)."""
    topo = run.topology or {}
    if topo.get("nodes"):
        return len(topo["nodes"])
    opts = run.store.options
    return int(opts.get("nodes") or opts.get("replicas") or 1)


def _first_family(v: ViewInput, c: Config) -> list[Point]:
    """The configuration's unfiltered searches of its first search setting,
    by client count."""
    fams = families(v, [c])
    return fams[0] if fams else []


def _cores_used(p: Point) -> list[float]:
    """Each node's cores over the task's measured window."""
    t = p.t
    if t is None or not t.server_node_cpu_s or not t.elapsed_s:
        return []
    return [s / t.elapsed_s for s in t.server_node_cpu_s.values()]


def _busy(p: Point, used: list[float], cores: int) -> float | None:
    """How busy the machine's cores were over the task: the nodes, the
    clients and every other process."""
    t = p.t
    if t is None or not cores or not used:
        return None
    other = (t.machine_load or {}).get("other_cpu_cores") or 0.0
    return (sum(used) + (t.client_cpu_per_s or 0.0) + other) / cores


def limit(run: Record, p: Point) -> str:
    """What held the run back: each node at its quota, the machine (quotas
    adding up to its cores, or its cores busy), or neither."""
    cores = run.machine.get("cores_logical") or 0
    quota = run.store.options.get("node_cpus")
    used = _cores_used(p)
    n = nodes_of(run)
    if quota and cores and n * quota >= cores:
        return f"machine (quotas {n * quota:g} cores of {cores})"
    busy = _busy(p, used, cores)
    if busy is not None and busy >= BUSY:
        return f"machine ({busy:.0%} busy)"
    if quota and used and min(used) >= 0.85 * quota:
        return "node quotas"
    return "-"


def applies(v: ViewInput) -> bool:
    runs = v.ok
    seen = {k: {str(r.store.options.get(k)) for r in runs} for k in AXES}
    return any(len(s) > 1 for s in seen.values()) or any(nodes_of(r) > 1 for r in runs)


def _rows(v: ViewInput) -> list[tuple[Config, Point, Record]]:
    out = []
    for c in v.configs():
        for p in _first_family(v, c):
            if p.number("ops_per_s"):
                out.append((c, p, p.pick.run))
    return sorted(out, key=lambda x: (x[0].engine, x[1].clients, nodes_of(x[2]), x[0].label))


@register("search", "cluster", "Throughput and latency per topology (replicas, nodes)")
def cluster_table(v: ViewInput) -> list[Block]:
    if not applies(v):
        return []
    rows = []
    for c, p, run in _rows(v):
        opts: dict[str, Any] = run.store.options
        used = _cores_used(p)
        rows.append(
            [
                c.label,
                str(nodes_of(run)),
                str(opts.get("replicas", 1)),
                str(opts.get("shards", 1)),
                f"{opts['node_cpus']:g}" if opts.get("node_cpus") else "-",
                clients_text(p.clients),
                qps(p),
                lat(p, "mean"),
                lat(p, "p99"),
                f"{min(used):.2f}-{max(used):.2f}" if used else "-",
                limit(run, p),
                p.pick.run_short,
            ]
        )
    if not rows:
        return []
    header = ["configuration", "nodes", "replicas", "shards", "quota/node"]
    header += ["clients", "QPS", "mean", "p99", "cores used/node", "limit", "run"]
    return [
        Text(
            "Each row: the configuration's search at one client count. Replicas: copies of "
            "the data, each on a node of its own; quota/node: the CPU each node may use "
            "(cores); cores used/node: the least and the most any node used over the phase. "
            "Limit: 'node quotas' when every node used at least 85% of its quota, 'machine' "
            "when the quotas add up to the machine's cores or its cores were 90% busy. "
            + aggregation_note(v.how)
        ),
        Table("Per topology", header, rows),
    ]


@register("search", "cluster_plot", "QPS and latency per topology", needs_plots=True)
def cluster_plot(v: ViewInput) -> list[Block]:
    if not applies(v):
        return []
    rows = _rows(v)
    by: dict[str, list[tuple[int, Point]]] = {}
    for c, p, run in rows:
        by.setdefault(f"{c.engine} {clients_text(p.clients)}", []).append((nodes_of(run), p))
    if not any(len(pts) > 1 for pts in by.values()):
        return []
    fig = plots.new_figure(9.0, 3.8, 1, 2)
    left, right = fig.axes
    for name, pts in by.items():  # a store and client count: one colour in both panels
        pts.sort(key=lambda x: x[0])
        xs = [n for n, _ in pts]
        plots.line(left, name, xs, [p.number("ops_per_s") or float("nan") for _, p in pts])
        for key, ls in (("mean", "-"), ("p99", "--")):
            ys = [p.number(f"latency_ns.{key}") or float("nan") for _, p in pts]
            label = {} if key == "mean" else {"label": f"{name} p99"}
            plots.line(right, name, xs, ys, ls=ls, **label)
    lat_title = "latency (solid: mean, dashed: p99)"
    nodes = [n for pts in by.values() for n, _ in pts]
    plots.doubling_axes(right, left, "nodes", lat_title, right, nodes)
    return [
        plots.render(
            fig,
            v.name("cluster"),
            "QPS and latency per topology",
            "Log axes, as in the Milvus evaluation's replica and scale-out figures; a "
            "line per store and client count.",
        )
    ]


for _w in WORKLOADS[1:]:
    register(_w, "cluster", "Throughput and latency per topology (replicas, nodes)")(cluster_table)
    register(_w, "cluster_plot", "QPS and latency per topology", needs_plots=True)(cluster_plot)
