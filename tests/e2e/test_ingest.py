"""The ingest scenario: every document lands once, whatever the split."""

import pytest

import storebench


@pytest.mark.parametrize("clients, batch, inflight", [(1, 1, 1), (3, 7, 1), (2, 4, 3)])
def test_ingest_inserts_every_document_once(tmp_path, clients, batch, inflight):
    sets = {
        "count": 1000,
        "concurrency": clients,
        "batch_size": batch,
        "inflight": inflight,
        "complexity": 3,
    }
    recs = storebench.run("ingest", stores=["memory", "sqlite"], set=sets, results_dir=tmp_path)
    assert len(recs) == 2  # values set for gridded parameters replace their axes
    for rec in recs:
        assert rec["status"] == "ok", rec["error"]
        (task,) = rec["tasks"]
        p = rec["params"]
        assert task["ops"] == -(-1000 // p["batch_size"])
        assert (p["concurrency"], p["batch_size"], p["inflight"]) == (clients, batch, inflight)
        assert task["items"] >= 1000 and task["clients"] == clients
        assert rec["metrics"]["docs_per_s"] > 0


def test_in_flight_requests_run_as_lanes_per_client(tmp_path):
    from storebench.data.batch import Schema
    from storebench.driver import Driver, FnOp, Task
    from storebench.stores.base import StoreSpec

    seen = []

    class Record:
        def __call__(self, coll, lane, lanes):
            seen.append((lane, lanes))
            return FnOp(lambda i: None)

    coll = StoreSpec("null").open().create_collection("x", Schema())
    stats, _ = Driver().run(Task("t", Record(), clients=2, inflight=3, ops=60), coll)
    assert sorted(seen) == [(lane, 6) for lane in range(6)]
    assert stats.ops == 60 and stats.clients == 2 and stats.extra["inflight"] == 3
