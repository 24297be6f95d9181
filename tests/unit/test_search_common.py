"""The pieces the vector search workloads share: the recall-target tuner,
recall and precision, client CPU accounting, engine-side time, search
answers made from an engine's rows."""

import numpy as np
import pytest

from storebench.data.truth import GroundTruth
from storebench.results.records import TaskRecord
from storebench.results.scores import RECALL
from storebench.stores.base import SearchResult
from storebench.workloads.vector.accounting import client_accounting, engine_delta
from storebench.workloads.vector.params import powers_of_two
from storebench.workloads.vector.scoring import score, score_found
from storebench.workloads.vector.tuning import tune


def counting(fn):
    calls = []

    def recall_of(v):
        calls.append(v)
        return fn(v)

    return recall_of, calls


def test_tuning_converges_to_the_smallest_value_reaching_the_target():
    recall_of, calls = counting(lambda v: 1 - 1 / v)  # >= 0.95 from v = 20
    t = tune(recall_of, 0.95, start=4, maximum=4096)
    assert t.reached and t.value == 20 and t.recall == pytest.approx(0.95)
    probed = dict(t.probes)
    assert probed[19] < 0.95 <= probed[20]  # the value below was seen to fall short
    assert len(calls) == len(set(calls)) <= 2 * np.log2(4096)  # doubling then bisection
    assert t.monotone and not t.violations
    assert [v for v, _ in t.probes] == sorted(probed)


@pytest.mark.parametrize("threshold", [1, 2, 3, 17, 64, 65, 100, 1000])
def test_tuning_finds_every_threshold(threshold):
    t = tune(lambda v: 0.99 if v >= threshold else 0.5, 0.95, start=1, maximum=1024)
    assert t.value == threshold


def test_a_target_reached_at_the_start_is_the_start():
    t = tune(lambda v: 0.99, 0.95, start=10, maximum=100)
    assert t.value == 10 and t.probes == [(10, 0.99)]


def test_an_unreachable_target_says_so_and_keeps_the_best_probe():
    t = tune(lambda v: min(0.9, v / 100), 0.95, start=8, maximum=200)
    assert not t.reached and t.value is None
    assert t.best == 128 and t.recall == 0.9  # the highest recall, at its smallest value
    assert max(v for v, _ in t.probes) == 200  # the maximum itself was probed
    assert t.record()["reached"] is False


def test_recall_falling_as_the_parameter_grows_is_flagged():
    # recall dips at 32: bisection's assumption does not hold
    curve = {8: 0.7, 16: 0.9, 32: 0.85, 64: 0.97}
    t = tune(lambda v: curve.get(v, 0.96 if v > 32 else 0.88), 0.95, start=8, maximum=64)
    assert not t.monotone
    assert (16, 32) in t.violations
    # within the tolerance a wobble is not a violation
    t2 = tune(lambda v: {8: 0.9, 16: 0.899, 32: 0.99}.get(v, 0.99), 0.95, 8, 32, tolerance=0.005)
    assert t2.monotone


def test_precision_counts_hits_among_the_results_returned():
    truth = GroundTruth(
        np.array([[0, 1, 2, 3], [4, 5, 6, 7]], np.int64),
        np.array([[0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]], np.float32),
    )
    found = np.array([[0, 1, -1], [4, 9, 6]], np.int64)  # a short answer, a miss
    s = score_found(found, truth, 3)
    assert s.of(RECALL) == pytest.approx((2 / 3 + 2 / 3) / 2)
    assert s.scores["precision@3"] == pytest.approx(4 / 5)  # 4 hits among 5 results returned
    assert s.short == 1 and s.queries == 2
    # clients' payloads: each query scored once, unseen ones left out
    seen = np.array([True, False])
    s2 = score([(found, seen)], truth, 3)
    assert s2.queries == 1 and s2.of(RECALL) == pytest.approx(2 / 3)
    none = score([(found, ~seen & seen)], truth, 3).scores
    peers = ["recall@3 (ann-benchmarks)", "recall@3 (VectorDBBench)"]
    assert list(none) == ["recall@3", "precision@3", *peers] and set(none.values()) == {None}


def test_client_saturation_rule(monkeypatch):
    from storebench.workloads.vector import accounting

    monkeypatch.setattr(accounting, "cpu_count", lambda: 2)
    # threads: 4 thread clients sharing 0.95 core
    rec = {"elapsed_s": 2.0, "client_cpu_s": 2.0 * 0.95}
    a = client_accounting(TaskRecord(**rec), "threads", 4)
    assert a["client_cpu_per_s"] == pytest.approx(0.95)
    assert a["client_cpu_ceiling"] == 1.0 and a["client_saturated"]
    # threads whose work runs outside the GIL (an embedded engine) can use the cores
    gil_free = client_accounting(TaskRecord(elapsed_s=1.0, client_cpu_s=1.2), "threads", 4)
    assert gil_free["client_cpu_ceiling"] == 2.0 and not gil_free["client_saturated"]
    # ... even one client thread, when the engine searches on threads of its own
    one = client_accounting(TaskRecord(elapsed_s=1.0, client_cpu_s=1.2), "threads", 1)
    assert one["client_cpu_ceiling"] == 2.0 and not one["client_saturated"]
    # processes: their own CPU each, up to the cores
    busy = {"elapsed_s": 1.0, "client_cpu_s": 1.9, "server_cpu_s": 0.5}
    b = client_accounting(TaskRecord(**busy), "processes", 4)
    assert b["client_cpu_ceiling"] == 2.0 and b["client_saturated"]
    assert b["server_cpu_per_s"] == 0.5
    idle = client_accounting(TaskRecord(elapsed_s=1.0, client_cpu_s=1.0), "processes", 4)
    assert not idle["client_saturated"]
    assert client_accounting(TaskRecord(elapsed_s=0, client_cpu_s=1), "threads", 1) == {}


def test_engine_time_per_call_from_counters_before_and_after():
    before = {"search": {"calls": 10, "time_s": 0.01, "command": "FT.SEARCH"}}
    after = {"search": {"calls": 110, "time_s": 0.06, "command": "FT.SEARCH"}}
    d = engine_delta(before, after, "search", ours_ns=800_000.0)
    assert d["calls"] == 100 and d["mean_ns"] == pytest.approx(500_000)
    assert d["client_share_ns"] == pytest.approx(300_000) and d["command"] == "FT.SEARCH"
    assert engine_delta(None, None, "search", 1.0) is None
    assert engine_delta(after, after, "search", 1.0) is None  # no calls in between


def test_concurrency_doubles_up_to_the_maximum():
    assert powers_of_two(16) == [1, 2, 4, 8, 16]
    assert powers_of_two(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert powers_of_two(1) == [1]


def test_synthetic_queries_come_from_the_documents_distribution():
    # queries drawn around other centres than the documents' are far from
    # every document, and every ANN index then looks bad (recall ~0.4 at
    # 100k x 128 with ef=64 where 0.95 is right)
    from types import SimpleNamespace

    from storebench.workloads.vector.data import VectorData

    p = SimpleNamespace(dataset=None, n=2000, dim=32, metric="l2", data="clustered", seed=3)
    data = VectorData(p)
    q = data.queries(50)
    docs = data.vecs

    def nearest(a, b):
        d2 = (a * a).sum(1)[:, None] - 2 * a @ b.T + (b * b).sum(1)[None]
        return np.sqrt(np.maximum(d2, 0)).min(1)

    doc_to_doc = np.sort(
        np.sqrt(np.maximum(((docs[:50, None] - docs[None, 50:]) ** 2).sum(-1), 0)), 1
    )[:, 0]
    assert np.median(nearest(q, docs)) < 1.5 * np.median(doc_to_doc)
    assert not np.isin(q, docs).all(1).any()  # new points, not copies


def test_server_cpu_per_second_uses_the_span_the_sampler_covered():
    # the sampler runs over the whole phase (client setup, warm-up); dividing
    # its CPU by the measured elapsed time read 2.19 cores on a 2-core box
    rec = {"elapsed_s": 1.0, "client_cpu_s": 0.2, "server_cpu_s": 3.0, "server_sampled_s": 2.0}
    assert client_accounting(TaskRecord(**rec), "processes", 2)["server_cpu_per_s"] == 1.5
    del rec["server_sampled_s"]  # an older record: the measured time
    assert client_accounting(TaskRecord(**rec), "processes", 2)["server_cpu_per_s"] == 3.0


def test_answers_from_rows_are_padded_per_query():
    """Each query's rows in its own row of the answer, nearest first, the
    rest padding (-1, inf): k each, fewer, none, ids as the engine's text."""
    answers = [[(4, 0.5), (9, 0.75)], [], [("7", 0.25)], [(1, 0.0), (2, 0.5)]]
    res = SearchResult.from_rows(answers, 2, lambda rows: rows)
    assert res.ids.dtype == np.int64 and res.distances.dtype == np.float32
    assert res.ids.tolist() == [[4, 9], [-1, -1], [7, -1], [1, 2]]
    assert res.distances.tolist() == [[0.5, 0.75], [np.inf] * 2, [0.25, np.inf], [0.0, 0.5]]
    full = SearchResult.from_rows(answers[:1], 2, lambda rows: rows)
    assert full.ids.tolist() == [[4, 9]] and full.distances.tolist() == [[0.5, 0.75]]
    none = SearchResult.from_rows([[], []], 3, lambda rows: rows)
    assert none.ids.tolist() == [[-1] * 3] * 2 and np.isinf(none.distances).all()
    asked: list[object] = []
    zero = SearchResult.from_rows(answers, 0, asked.append)  # nothing asked for k = 0
    assert zero.ids.shape == zero.distances.shape == (4, 0) and not asked
