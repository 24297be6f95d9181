"""Each reader on small files written here, and their corrupt variants."""

import json

import numpy as np
import pytest

from storebench.data import formats
from storebench.errors import UserError

h5py = pytest.importorskip("h5py")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


# --- writers (the formats' definitions, independent of the readers) -----------


def write_vecs(path, a):
    a = np.asarray(a)
    n, d = a.shape
    dt = {".fvecs": "<f4", ".ivecs": "<i4", ".bvecs": "u1"}[path.suffix]
    with open(path, "wb") as f:
        for row in a:
            f.write(np.int32(d).tobytes())
            f.write(row.astype(dt).tobytes())
    return path


def write_bin(path, a):
    a = np.asarray(a)
    dt = {".fbin": "<f4", ".u8bin": "u1", ".i8bin": "i1", ".ibin": "<i4"}[path.suffix]
    with open(path, "wb") as f:
        f.write(np.array(a.shape, "<i4").tobytes())
        f.write(a.astype(dt).tobytes())
    return path


def write_gt(path, ids, dist):
    with open(path, "wb") as f:
        f.write(np.array(ids.shape, "<i4").tobytes())
        f.write(ids.astype("<u4").tobytes())
        f.write(dist.astype("<f4").tobytes())
    return path


def write_hdf5(path, train, test, neighbors=None, distance="euclidean"):
    with h5py.File(path, "w") as f:
        f.attrs["distance"] = distance
        f.create_dataset("train", data=train)
        f.create_dataset("test", data=test)
        if neighbors is not None:
            f.create_dataset("neighbors", data=neighbors)
            f.create_dataset("distances", data=np.zeros(neighbors.shape, np.float32))
    return path


def emb_table(ids, vecs):
    emb = pa.array([list(map(float, v)) for v in vecs], type=pa.list_(pa.float32()))
    return pa.table({"id": pa.array(ids, pa.int64()), "emb": emb})


def vecs(n=50, d=8, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


def read_all(src):
    return np.concatenate(list(src.chunks(rows=7)))


# --- TEXMEX -------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".fvecs", ".ivecs", ".bvecs"])
def test_vecs_files_are_memory_mapped_views(tmp_path, suffix):
    a = vecs()
    if suffix != ".fvecs":
        a = np.abs(a * 40).astype(np.int64)
    p = write_vecs(tmp_path / f"x{suffix}", a)
    m = formats.open_vecs(p)
    assert isinstance(m.base, np.memmap) or isinstance(m, np.memmap)
    assert m.shape == (50, 8)
    np.testing.assert_array_equal(np.asarray(m, dtype=np.float64), a.astype(np.float64))
    np.testing.assert_array_equal(formats.open_vecs(p, limit=5), m[:5])


def test_truncated_vecs_file_names_the_file_and_the_problem(tmp_path):
    p = write_vecs(tmp_path / "base.fvecs", vecs())
    data = p.read_bytes()
    p.write_bytes(data[:-3])
    with pytest.raises(UserError) as e:
        formats.open_vecs(p)
    msg = str(e.value)
    assert msg.startswith(str(p) + ": ") and "not a whole number of 36-byte rows" in msg
    assert "\n" not in msg


def test_vecs_row_with_another_dimension_is_caught(tmp_path):
    p = write_vecs(tmp_path / "base.fvecs", vecs(n=20))
    raw = bytearray(p.read_bytes())
    raw[36 * 19 : 36 * 19 + 4] = np.int32(9).tobytes()  # last row claims d=9
    p.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="row 19 declares dimension 9, the file 8"):
        formats.open_vecs(p)


def test_vecs_garbage_header_is_not_a_vecs_file(tmp_path):
    p = tmp_path / "junk.fvecs"
    p.write_bytes(b"\xff\xff\xff\x7f" + b"\0" * 100)
    with pytest.raises(UserError, match="declares dimension 2147483647; not a .fvecs file"):
        formats.open_vecs(p)


def test_nan_in_vectors_names_the_row(tmp_path):
    a = vecs()
    a[33, 2] = np.nan
    p = write_vecs(tmp_path / "base.fvecs", a)
    src = formats.open_source(p, metric="l2")
    with pytest.raises(UserError, match=r"base.fvecs: row 33: vector holds NaN or inf"):
        read_all(src.base)
    a[33, 2] = np.inf
    write_bin(tmp_path / "b.fbin", a)
    with pytest.raises(UserError, match="row 33"):
        read_all(formats.open_source(tmp_path / "b.fbin").base)


# --- big-ann -------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".fbin", ".u8bin", ".i8bin", ".ibin"])
def test_bin_files_memory_map_exactly(tmp_path, suffix):
    a = vecs(n=30, d=5)
    a = a if suffix == ".fbin" else (np.abs(a) * 30).astype(np.int64)
    p = write_bin(tmp_path / f"base{suffix}", a)
    m = formats.open_bin(p)
    assert isinstance(m, np.memmap) and m.shape == (30, 5)
    np.testing.assert_array_equal(np.asarray(m, np.float64), a.astype(np.float64))


def test_bin_header_that_disagrees_with_the_size(tmp_path):
    p = write_bin(tmp_path / "base.fbin", vecs(n=30, d=5))
    raw = p.read_bytes()
    p.write_bytes(raw[:-4])
    with pytest.raises(
        UserError,
        match=r"header declares 30 x 5 \(608 bytes\) but the file has 604 bytes \(truncated\)",
    ):
        formats.open_bin(p)
    p.write_bytes(raw + b"\0" * 8)
    with pytest.raises(UserError, match="trailing data"):
        formats.open_bin(p)
    p.write_bytes(b"\1\0")
    with pytest.raises(UserError, match="too short for a header"):
        formats.open_bin(p)


def test_bigann_ground_truth_and_directory_layout(tmp_path):
    base = (np.abs(vecs(n=40, d=6)) * 20).astype(np.uint8)
    q = base[:4].astype(np.float32) + 1
    write_bin(tmp_path / "base.10M.u8bin", base)
    write_bin(tmp_path / "query.public.10K.u8bin", q)
    ids = np.tile(np.arange(5, dtype=np.uint32), (4, 1))
    write_gt(tmp_path / "GT_10M", ids, np.ones((4, 5), np.float32))
    src = formats.open_source(tmp_path, metric="l2")
    assert len(src.base) == 40 and len(src.queries) == 4
    assert (src.neighbors == ids).all() and src.distances.shape == (4, 5)
    # a ground-truth file whose ids point outside the base
    write_gt(tmp_path / "GT_10M", ids + 100, np.ones((4, 5), np.float32))
    with pytest.raises(
        UserError, match="GT_10M: query 0: neighbour 100 is outside the 40 base rows"
    ):
        formats.open_source(tmp_path, metric="l2")


def test_texmex_directory_with_queries_and_groundtruth(tmp_path):
    a = vecs(n=60)
    write_vecs(tmp_path / "sift_base.fvecs", a)
    write_vecs(tmp_path / "sift_query.fvecs", a[:3])
    write_vecs(tmp_path / "sift_groundtruth.ivecs", np.tile(np.arange(10), (3, 1)))
    src = formats.open_source(tmp_path, metric="l2")
    assert src.base.dim == 8 and len(src.queries) == 3 and src.neighbors.shape == (3, 10)
    write_vecs(tmp_path / "sift_query.fvecs", vecs(n=3, d=7))
    with pytest.raises(UserError, match="sift_query.fvecs: queries have dimension 7, the base 8"):
        formats.open_source(tmp_path, metric="l2")


# --- HDF5 ------------------------------------------------------------------------


def test_hdf5_is_read_lazily_with_metric_and_neighbours(tmp_path):
    train, test = vecs(n=100), vecs(n=10, seed=1)
    nb = np.tile(np.arange(7), (10, 1))
    p = write_hdf5(tmp_path / "x-8-angular.hdf5", train, test, nb, distance="angular")
    src = formats.open_source(p)
    try:
        assert src.metric == "cosine" and src.kind == "hdf5"
        assert isinstance(src.base.array, h5py.Dataset)  # read lazily, not an array
        np.testing.assert_array_equal(read_all(src.base), train)
        np.testing.assert_array_equal(read_all(src.queries), test)
        assert (src.neighbors == nb).all()
    finally:
        src.close()


@pytest.mark.parametrize(
    "breakage, message",
    [
        ("garbage", "not a readable HDF5 file"),
        ("truncated", "not a readable HDF5 file"),
        ("no-train", "no 'train' dataset (found: test); not an ann-benchmarks file"),
        ("test-dim", "'test' has shape (10, 5), 'train' dimension 8"),
        ("neighbors", "'neighbors' has shape (3, 7) for 10 test vectors"),
        ("distance", "distance 'hamming' is not supported"),
        ("nan", "x.hdf5:train: row 50: vector holds NaN or inf"),
    ],
)
def test_corrupt_hdf5_is_one_clear_line(tmp_path, breakage, message):
    p = tmp_path / "x.hdf5"
    train, test = vecs(n=100), vecs(n=10, seed=1)
    if breakage == "garbage":
        p.write_bytes(b"this is not hdf5" * 100)
    elif breakage == "truncated":
        write_hdf5(p, train, test)
        p.write_bytes(p.read_bytes()[:3000])
    elif breakage == "no-train":
        with h5py.File(p, "w") as f:
            f.create_dataset("test", data=test)
    elif breakage == "test-dim":
        write_hdf5(p, train, vecs(n=10, d=5))
    elif breakage == "neighbors":
        write_hdf5(p, train, test, np.zeros((3, 7), np.int64))
    elif breakage == "distance":
        write_hdf5(p, train, test, distance="hamming")
    elif breakage == "nan":
        train[50, 0] = np.nan
        write_hdf5(p, train, test)
    with pytest.raises(UserError) as e:
        src = formats.open_source(p)
        read_all(src.base)
    assert str(e.value).startswith(str(p)) and message in str(e.value)
    assert "\n" not in str(e.value)


# --- Parquet ---------------------------------------------------------------------


def vdb_dir(tmp_path, n=80, d=8, nq=5, shards=2):
    a = vecs(n=n, d=d)
    ids = np.arange(n) * 3 + 1000  # ids that are not positions
    cut = n // shards
    for s in range(shards):
        sl = slice(s * cut, n if s == shards - 1 else (s + 1) * cut)
        pq.write_table(
            emb_table(ids[sl], a[sl]), tmp_path / f"train-{s:02d}-of-{shards:02d}.parquet"
        )
    q = vecs(n=nq, d=d, seed=9)
    pq.write_table(emb_table(np.arange(nq), q), tmp_path / "test.parquet")
    nb_pos = np.tile(np.arange(10), (nq, 1))
    pq.write_table(
        pa.table({"id": np.arange(nq), "neighbors_id": [list(ids[r]) for r in nb_pos]}),
        tmp_path / "neighbors.parquet",
    )
    labels = np.where(np.arange(n) % 10 == 0, "label_10p", "label_90p")
    pq.write_table(pa.table({"id": ids, "labels": labels}), tmp_path / "scalar_labels.parquet")
    return a, ids, q, nb_pos, labels


def test_vectordbbench_parquet_directory(tmp_path):
    a, ids, q, nb_pos, labels = vdb_dir(tmp_path)
    src = formats.open_source(tmp_path, metric="cosine")
    assert src.kind == "parquet" and len(src.base) == 80 and src.base.dim == 8
    np.testing.assert_array_equal(read_all(src.base), a)
    np.testing.assert_array_equal(read_all(src.queries), q)
    assert (src.ids == ids).all()
    assert (src.neighbors == nb_pos).all()  # neighbour ids mapped back to positions
    assert (src.fields["labels"] == labels).all()


def test_parquet_vectors_of_the_wrong_dimension_or_null(tmp_path):
    rows = [[1.0, 2.0, 3.0]] * 5 + [[1.0, 2.0]]
    pq.write_table(
        pa.table({"id": np.arange(6), "emb": pa.array(rows, pa.list_(pa.float32()))}),
        tmp_path / "train.parquet",
    )
    with pytest.raises(
        UserError, match=r"train.parquet: row 5: vector has dimension 2, expected 3"
    ):
        read_all(formats.open_source(tmp_path / "train.parquet", metric="l2").base)
    pq.write_table(
        pa.table(
            {"id": np.arange(3), "emb": pa.array([[1.0], None, [2.0]], pa.list_(pa.float32()))}
        ),
        tmp_path / "train.parquet",
    )
    with pytest.raises(UserError, match="row 1: vector is null"):
        read_all(formats.open_source(tmp_path / "train.parquet", metric="l2").base)
    pq.write_table(pa.table({"vector": [[1.0]]}), tmp_path / "train.parquet")
    with pytest.raises(UserError, match="no column 'emb' \\(columns: vector\\)"):
        formats.open_source(tmp_path / "train.parquet", metric="l2")
    (tmp_path / "train.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(UserError, match="not a readable Parquet file"):
        formats.open_source(tmp_path / "train.parquet", metric="l2")


def test_parquet_neighbour_id_unknown_to_the_base(tmp_path):
    vdb_dir(tmp_path)
    pq.write_table(
        pa.table({"id": np.arange(5), "neighbors_id": [[1000, 5]] * 5}),
        tmp_path / "neighbors.parquet",
    )
    with pytest.raises(
        UserError, match="neighbors.parquet: query 0: neighbour id 5 is not a base id"
    ):
        formats.open_source(tmp_path, metric="l2")


# --- qdrant compound, dispatch ------------------------------------------------------


def test_compound_layout_and_a_bad_test_line(tmp_path):
    a = vecs(n=30)
    np.save(tmp_path / "vectors.npy", a)
    lines = [
        json.dumps({"query": a[i].tolist(), "conditions": None, "closest_ids": [i, 1, 2]})
        for i in range(4)
    ]
    (tmp_path / "tests.jsonl").write_text("\n".join(lines) + "\n")
    src = formats.open_source(tmp_path, metric="cosine")
    assert len(src.base) == 30 and len(src.queries) == 4 and src.neighbors[2, 0] == 2
    (tmp_path / "tests.jsonl").write_text(lines[0] + "\n{not json\n")
    with pytest.raises(UserError, match=r"tests.jsonl:2: bad test line"):
        formats.open_source(tmp_path, metric="cosine")


def test_unknown_or_missing_files(tmp_path):
    with pytest.raises(UserError, match=r"nope.fvecs: file not found"):
        formats.open_source(tmp_path / "nope.fvecs")
    (tmp_path / "x.csv").write_text("1,2\n")
    with pytest.raises(UserError, match=r"x.csv: unknown dataset format '.csv'"):
        formats.open_source(tmp_path / "x.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no dataset found in the directory"):
        formats.open_source(tmp_path / "empty")


def test_vectordbbench_directory_files_beside_the_data(tmp_path):
    """VectorDBBench's own extra files (filtered-case truths, the shuffled
    base) are not read; a meta.json may state the metric; an unknown Parquet
    file is refused by name."""
    a, ids, q, nb_pos, labels = vdb_dir(tmp_path, shards=1)
    pq.write_table(emb_table(ids[::-1], a[::-1]), tmp_path / "shuffle_train.parquet")
    pq.write_table(
        pa.table({"id": [0], "neighbors_id": [[1]]}), tmp_path / "neighbors_head_1p.parquet"
    )
    (tmp_path / "meta.json").write_text(json.dumps({"metric_type": "COSINE"}))
    src = formats.open_source(tmp_path)
    assert src.metric == "cosine" and len(src.base) == 80
    np.testing.assert_array_equal(read_all(src.base), a)  # train, not the shuffled copy
    assert formats.open_source(tmp_path, metric="ip").metric == "ip"  # a given metric wins
    (tmp_path / "meta.json").write_text(json.dumps({"metric_type": "HAMMING"}))
    with pytest.raises(UserError, match=r"meta.json: metric_type: distance 'HAMMING' is not"):
        formats.open_source(tmp_path)
    (tmp_path / "meta.json").write_text("not json")
    assert formats.open_source(tmp_path).metric is None
    pq.write_table(pa.table({"x": [1]}), tmp_path / "queries2.parquet")
    with pytest.raises(UserError, match=r"queries2.parquet: not a file of a VectorDBBench"):
        formats.open_source(tmp_path)
