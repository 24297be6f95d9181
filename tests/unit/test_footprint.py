"""The footprint columns: bytes per vector from the store's own size only,
a server's data directory shown as such, and the footprint of a part of a
run (a stage, a size) from that part's tasks and size."""

from storebench.report.footprint import footprint, footprint_cells
from storebench.results.records import RunRecord


def record(metrics, tasks, workload="streaming"):
    return RunRecord(run_id="r", workload=workload, status="ok", metrics=metrics, tasks=tasks)


TASKS = [
    {"name": "upload", "server_peak_rss_bytes": 50 * 2**20, "server_data_bytes": 4096},
    {"name": "insert 80% c=1", "stage": 0.8, "server_peak_rss_bytes": 60 * 2**20},
    {"name": "insert 100% c=1", "stage": 1.0, "server_peak_rss_bytes": 70 * 2**20},
]


def test_the_stores_own_size_gives_bytes_per_vector():
    rec = record({"size_bytes": 2_000_000, "size_vectors": 2000}, TASKS)
    f = footprint(rec)
    assert (f.peak_rss, f.data_bytes, f.vectors, f.from_dir) == (70 * 2**20, 2e6, 2000, False)
    assert footprint_cells(f) == ["70.0 MiB", "1.9 MiB", "1,000"]


def test_a_data_directory_is_marked_and_gives_no_bytes_per_vector():
    """An in-memory server's directory holds its snapshots only: 4 KiB over
    2,000 vectors is no figure of what they take."""
    f = footprint(record({}, TASKS, "search"))
    assert f.from_dir and f.data_bytes == 4096 and f.per_vector is None
    assert footprint_cells(f)[1:] == ["4.0 KiB (dir)", "-"]


def test_a_stage_has_its_own_footprint():
    stage = {"stage": 0.8, "size_bytes": 1_600_000, "size_vectors": 1600}
    rec = record({"size_bytes": 2_000_000, "size_vectors": 2000, "stages": [stage]}, TASKS)
    f = footprint(rec, {"stage": 0.8}, stage)
    assert (f.peak_rss, f.data_bytes, f.vectors) == (60 * 2**20, 1.6e6, 1600)
    assert f.per_vector == 1000
    # a part without a size of its own: no store figure, no vectors
    f = footprint(rec, {"stage": 1.0}, {})
    assert f.data_bytes is None and f.per_vector is None and f.peak_rss == 70 * 2**20
