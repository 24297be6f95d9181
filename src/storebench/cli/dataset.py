"""``storebench dataset``: list, inspect, fetch, make and import datasets, and
compute their exact ground truth. Imports of the data modules are local to
each command so ``storebench --help`` stays fast."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from storebench.data import synthetic
from storebench.errors import UserError

METRICS = click.Choice(["l2", "ip", "cosine"])


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


@contextlib.contextmanager
def _bar(label: str, total: int | None, enabled: bool | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr (when it is a terminal, or forced; never with -q)."""
    from rich.progress import MofNCompleteColumn, TimeElapsedColumn

    from storebench.data.fetch import progress_bar

    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.find_root().meta.get("storebench.quiet"):
        enabled = False
    with progress_bar(enabled, MofNCompleteColumn(), TimeElapsedColumn()) as p:
        task = p.add_task(label, total=total)
        yield lambda n: p.advance(task, n)


def _console() -> Any:
    from storebench.report.terminal import make_console

    return make_console()


def _done(ds: Any, t0: float, more: str = "") -> None:
    """The line a command that wrote dataset ``ds`` ends with."""
    click.echo(
        f"{ds.name}: {ds.n:,} x {ds.dim} {ds.metric}, {ds.nq:,} queries{more} "
        f"in {ds.path} ({time.perf_counter() - t0:.1f} s)"
    )


progress_option = click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar (default: when stderr is a terminal).",
)


@click.group()
def dataset() -> None:
    """Datasets: the standard sets, imported files, synthetic data, ground truth.

    Datasets live in $STOREBENCH_DATA (default ~/.cache/storebench) as
    memory-mappable arrays."""


@dataset.command(name="list")
@click.option("--local", "local_only", is_flag=True, help="Only datasets in the data directory.")
def list_(local_only: bool) -> None:
    """The registered standard sets and the datasets in the data directory."""
    from rich.table import Table

    from storebench.data import datasets, registry

    root = datasets.data_dir()
    local = set(datasets.local_names(root))
    t = Table("dataset", "dim", "metric", "vectors", "queries", "size", "source", "local")
    if not local_only:
        for e in registry.ENTRIES:
            t.add_row(
                e.name,
                str(e.dim),
                e.metric,
                f"{e.n:,}",
                "?" if e.nq is None else f"{e.nq:,}",
                "≈" + _gb(e.approx_bytes),
                e.source,
                "yes" if e.name in local else "",
            )
    for name in sorted(local - (set() if local_only else set(registry.REGISTRY))):
        try:
            ds = datasets.Dataset(root / name)
        except UserError as exc:
            t.add_row(name, "", "", "", "", "", f"unreadable: {exc}", "yes")
            continue
        t.add_row(
            name,
            str(ds.dim),
            ds.metric,
            f"{ds.n:,}",
            f"{ds.nq:,}",
            _gb(ds.info()["bytes"]),
            str(ds.meta.source.get("registry") or ds.meta.source.get("kind", "")),
            "yes",
        )
    _console().print(t)
    click.echo(f"data directory: {root}", err=True)


@dataset.command()
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.option(
    "--recall",
    is_flag=True,
    help="Also the recall@10 of a fixed HNSW build (hnswlib m=16, ef_construct=128) "
    "at ef 16/64/256, over the first 1,000 queries.",
)
def info(target: str, as_json: bool, recall: bool) -> None:
    """What TARGET holds: a dataset name, a registered set, or a file/directory
    in a known format (read and checked, not imported). A dataset with
    queries also shows its hardness: LID and relative contrast
    (docs/datasets.md, "Hardness")."""
    from storebench.data import datasets, formats, registry
    from storebench.data.fetch import recorded_checksums

    root = datasets.data_dir()
    out: dict[str, Any]
    if (root / target / "meta.json").exists() or datasets.is_dataset_dir(Path(target)):
        ds = datasets.Dataset(root / target if (root / target).exists() else Path(target))
        out = ds.info()
        if ds.nq:
            from storebench.data.hardness import SAMPLE, hardness

            out["hardness"] = hardness(ds.vectors, ds.queries, ds.metric)
            if recall:
                from storebench.workloads.vector.scoring import recall_curve

                curve = recall_curve(ds.vectors, ds.queries[:SAMPLE], ds.metric)
                out["hardness"]["recall@10 by ef"] = curve
    elif target in registry.REGISTRY and not Path(target).exists():
        e = registry.REGISTRY[target]
        out = {
            "name": e.name,
            "registered": True,
            "downloaded": False,
            "dim": e.dim,
            "metric": e.metric,
            "n": e.n,
            "queries": e.nq,
            "approx_bytes": e.approx_bytes,
            "source": e.source,
            "urls": [f.url for f in e.files],
            "sha256": {f.url: f.sha256 or recorded_checksums(root).get(f.url) for f in e.files},
            "notes": e.notes,
        }
        if e.package is not None:
            out["urls"] = [f"{e.package.client}: {e.package.requirement}"]
            out["sha256"] = {e.package.filename: e.package.sha256}
    elif Path(target).exists():
        src = formats.open_source(target)
        try:
            out = {
                "path": target,
                "format": src.kind,
                "n": len(src.base),
                "dim": src.base.dim,
                "metric": src.metric,
                "queries": 0 if src.queries is None else len(src.queries),
                "provided_truth_k": 0 if src.neighbors is None else int(src.neighbors.shape[1]),
                "fields": sorted(src.fields),
                "files": src.files,
            }
        finally:
            src.close()
    else:
        datasets.load(target)  # raises the right "unknown dataset" error
        return
    if as_json:
        click.echo(json.dumps(out, indent=2, default=str))
        return
    width = max(len(k) for k in out)
    for k, v in out.items():
        if isinstance(v, dict | list):
            v = json.dumps(v, default=str)
        click.echo(f"{k:<{width}}  {v}")


@dataset.command()
@click.argument("name")
@click.option("--mirror", metavar="URL", help="Fetch from this base URL instead (path kept).")
@click.option("--keep-download", is_flag=True, help="Keep the downloaded file after import.")
@click.option("--force", "replace", is_flag=True, help="Fetch and import again even if present.")
@click.option(
    "--limit", type=click.IntRange(min=2), help="Import only the first N rows (as NAME.firstN)."
)
@progress_option
def fetch(name: str, **options: Any) -> None:
    """Download a registered set (resuming, SHA-256 checked) and import it."""
    from storebench.data.fetch import fetch as fetch_set

    t0 = time.perf_counter()
    _done(fetch_set(name, **options), t0)


def _floats(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, ...]:
    if not value:
        return ()
    try:
        out = tuple(
            float(v.rstrip("%")) / (100 if v.endswith("%") else 1) for v in value.split(",")
        )
    except ValueError:
        raise click.BadParameter("a comma-separated list like 0.01,0.1,0.5,0.99") from None
    return out  # each in (0, 1]: checked with the rest of the spec (make_synthetic)


@dataset.command()
@click.option("--name", help="Dataset name (default: from the parameters).")
@click.option("-n", "--n", "n", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--dim", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--kind", type=click.Choice(synthetic.KINDS), default="embedding", show_default=True)
@click.option("--metric", type=METRICS, default="l2", show_default=True)
@click.option("--queries", "nq", type=click.IntRange(min=0), default=1000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--clusters", type=click.IntRange(min=1), default=64, show_default=True)
@click.option(
    "--tag-values",
    type=click.IntRange(min=0),
    default=None,
    help="tags.i uniform in [0, V) (DocArray); default n; 0 for none.",
)
@click.option(
    "--labels",
    callback=_floats,
    metavar="S1,S2,..",
    help="Keyword columns matching these fractions of rows, e.g. 0.01,0.1,0.5,0.99.",
)
@click.option(
    "--strings",
    type=click.IntRange(min=0),
    default=0,
    help="String attributes (arangob complexity).",
)
@click.option("--string-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--force", "replace", is_flag=True, help="Replace a dataset of the same name.")
@progress_option
def make(name: str | None, replace: bool, progress: bool | None, **spec: Any) -> None:
    """Generate a synthetic dataset (deterministic by seed, in chunks)."""
    from storebench.data import datasets

    t0 = time.perf_counter()
    with _bar("generating", spec["n"], progress) as bar:
        ds = datasets.make_synthetic(
            datasets.SyntheticSpec(**spec), name, replace=replace, progress=bar
        )
    _done(ds, t0, f", fields: {', '.join(ds.meta.fields) or 'none'}")


@dataset.command(name="import")
@click.argument("path", type=click.Path())
@click.option("--name", help="Dataset name (default: from the file name).")
@click.option("--queries", type=click.Path(), help="A separate file of query vectors.")
@click.option(
    "--truth", type=click.Path(), help="A separate file of true neighbours (.ivecs, big-ann GT)."
)
@click.option("--metric", type=METRICS, help="Required when the source does not say it.")
@click.option(
    "--holdout",
    type=click.IntRange(min=0),
    default=0,
    help="No queries in the source: hold out this many random base rows as queries.",
)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N base vectors.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --holdout.")
@click.option("--force", "replace", is_flag=True, help="Replace a dataset of the same name.")
@progress_option
def import_(path: str, name: str | None, progress: bool | None, **options: Any) -> None:
    """Import PATH (HDF5, fvecs/ivecs/bvecs, fbin/u8bin/i8bin, Parquet, npy, or a
    directory of them) into the data directory, checking every vector."""
    from storebench.data import datasets

    t0 = time.perf_counter()
    bars = lambda rows: _bar("importing", rows, progress)  # noqa: E731 (opened with the rows)
    ds = datasets.import_path(path, name, progress=bars, **options)
    k = ds.meta.provided_truth_k
    _done(ds, t0, f", provided truth k={k}" if k else "")


@dataset.command(name="truth")
@click.argument("target")
@click.option("-k", "--k", "k", type=click.IntRange(min=1), default=100, show_default=True)
@click.option(
    "--where", "where", metavar="FILTER", help='A filter, e.g. \'{"label_1p": "label_1p"}\'.'
)
@click.option("--metric", type=METRICS, help="Default: the dataset's.")
@click.option("--queries", "nq", type=click.IntRange(min=1), help="Only the first N queries.")
@click.option("--threads", type=click.IntRange(min=1), help="Worker threads (default: all CPUs).")
@click.option("--recompute", is_flag=True, help="Ignore cached and provided truth.")
@progress_option
def truth_(
    target: str,
    k: int,
    where: str | None,
    metric: str | None,
    nq: int | None,
    threads: int | None,
    recompute: bool,
    progress: bool | None,
) -> None:
    """Exact ground truth of TARGET's queries, computed once and cached."""
    import yaml

    from storebench.data import datasets

    ds = datasets.load(target)
    flt = None
    if where:
        try:
            flt = yaml.safe_load(where)
        except yaml.YAMLError as exc:
            raise UserError(f"not a filter: {exc}".splitlines()[0], where="--where") from None
        except (RecursionError, ValueError):  # too deep; an integer of 4300+ digits
            raise UserError(
                "not a filter: nested too deeply or too long", where="--where"
            ) from None
    mask = ds.mask(flt)
    m = metric or ds.metric
    q = ds.nq if nq is None else min(nq, ds.nq)
    how = "cached"

    def bars(work: int) -> Any:  # opened only when the truth is computed
        nonlocal how
        how = "computed"
        return _bar("ground truth", work, progress)

    t0 = time.perf_counter()
    gt = ds.truth(k, mask, metric=m, nq=q, recompute=recompute, threads=threads, progress=bars)  # type: ignore[arg-type]
    dt = time.perf_counter() - t0
    sel = "" if mask is None else f", filter keeps {int(mask.sum()):,} of {ds.n:,} rows"
    short = int((gt.ids < 0).any(axis=1).sum())
    note = f"; {short} queries have fewer than {k} matches" if short else ""
    click.echo(f"{ds.name}: k={k} {m} for {q:,} queries{sel}: {how} in {dt:.2f} s{note}")
