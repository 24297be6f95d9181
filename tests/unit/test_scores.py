"""The score catalogue: a score added in two places (its entry, its
computation) reaches the records, the report's views, the terminal,
compare and export, the peers' recall named after k in each; each recall
rule gives its own number where they differ; records written before scores
had their own field read back with them there."""

import io

import numpy as np
import pytest
from rich.console import Console

import storebench
from storebench.data.truth import GroundTruth
from storebench.report import compare, export, generic, search, terminal, views
from storebench.results import records, scores
from storebench.workloads.vector import scoring

NDCG = scores.Score("ndcg", "nDCG", short="ndcg")
PEERS = ["recall@10 (ann-benchmarks)", "recall@10 (VectorDBBench)"]


def ndcg(found, truth, k, fd):
    """Binary relevance (in the true top k), discounted by rank."""
    relevant = (found[:, :k, None] == truth.ids[:, None, :k]).any(axis=2)
    gains = 1 / np.log2(np.arange(2, k + 2))
    return float((relevant @ gains / gains.sum()).mean())


@pytest.fixture
def ndcg_added(monkeypatch):
    monkeypatch.setitem(scores.CATALOGUE, NDCG.name, NDCG)
    monkeypatch.setitem(scoring.COMPUTATIONS, NDCG.name, ndcg)


def test_a_score_added_to_the_catalogue_reaches_records_and_every_view(ndcg_added, tmp_path):
    small = {"n": 600, "dim": 8, "queries": 30, "k": 10, "min_window_s": 0, "grid": {}}
    small |= {"repeats": 1, "clients": [1], "labels": []}
    (raw,) = storebench.run("search", stores=["memory"], set=small, results_dir=tmp_path)
    rec = records.parse(raw)
    assert rec.status == "ok", rec.error
    task = rec.task("search c=1")
    # the memory store is exact: every true neighbour at its place, by every rule
    exact = {"recall@10": 1.0, "precision@10": 1.0, "ndcg@10": pytest.approx(1.0)}
    assert task.scores == exact | dict.fromkeys(PEERS, 1.0)
    assert rec.scores == task.scores  # the one setting's
    (back,) = records.load(tmp_path)
    assert back.task("search c=1").scores == task.scores

    v = views.ViewInput("search", [back])
    table = search.search_table(v)[1]
    assert table.columns[:6] == [
        "search",
        "Recall@10",
        "Precision@10",
        "Recall@10 (ann-benchmarks)",
        "Recall@10 (VectorDBBench)",
        "nDCG@10",
    ]
    assert table.rows[0][1:6] == ["1.0000"] * 5
    (tasks,) = [b for b in generic.tasks_table(v) if isinstance(b, views.Table)]
    console = Console(width=300, file=io.StringIO(), record=True, color_system=None)
    console.print(terminal.run_table(back, 300))
    text = console.export_text()
    rows = compare.compare([back], [back]).rows
    for key in ["ndcg@10", *PEERS]:
        assert any(f"{key}=1.0000" in cell for row in tasks.rows for cell in row)
        assert key in generic.run_metrics(v)[0].columns
        assert f"{key}=1.0000" in text
        assert [r.verdict for r in rows if r.metric == key] == ["same"]
        assert export.rows([back])[-1][key] == pytest.approx(1.0)


def test_each_recall_rule_gives_its_own_number_where_they_differ():
    # one query, k=3: ids 2 and 3 tie at the 3rd place; id 9, past the
    # listed truth, lies 0.0009 beyond it (within ann-benchmarks' absolute
    # 1e-3, outside our relative 1e-3 of 0.3)
    truth = GroundTruth(
        np.array([[0, 1, 2, 3, 4]] * 2, np.int64),
        np.array([[0.1, 0.2, 0.3, 0.3, 0.5]] * 2, np.float32),
    )
    found = np.array([[0, 3, 9], [0, 0, 1]], np.int64)  # the second repeats id 0
    fd = np.array([[0.1, 0.3, 0.3009], [0.1, 0.1, 0.2]], np.float32)
    s = scoring.score_found(found, truth, 3, fd).scores
    # ours: the tie counts, 9 does not; a repeat counts once: 2/3 and 2/3
    assert s["recall@3"] == pytest.approx(2 / 3)
    # ann-benchmarks: every returned distance <= 0.3 + 1e-3 counts, repeats too: 3/3, 3/3
    assert s["recall@3 (ann-benchmarks)"] == pytest.approx(1.0)
    # VectorDBBench: ids among the first three true ids {0, 1, 2}: 1/3, and 3/3 with repeats
    assert s["recall@3 (VectorDBBench)"] == pytest.approx((1 / 3 + 1) / 2)
    # without the found distances, ann-benchmarks' rule takes the truth's: 9 is a miss
    no_fd = scoring.score_found(found, truth, 3).scores["recall@3 (ann-benchmarks)"]
    assert no_fd == pytest.approx((2 / 3 + 1) / 2)

    key = "recall@3 (ann-benchmarks)"
    assert scores.title(key) == "Recall@3 (ann-benchmarks)" and scores.k_of(key) == 3
    assert scores.of(key).name == "recall (ann-benchmarks)" and scores.first(s) == "recall@3"
    assert scores.ordered(s)[2:] == [key, "recall@3 (VectorDBBench)"]


def test_scores_written_beside_the_fields_read_back_in_scores():
    task = {"name": "search c=1", "ops": 30, "phase": "search", "recall@10": 0.9}
    task["precision@10"] = 0.8
    v2 = {
        "run_id": "r-1",
        "record_version": 2,
        "tasks": [task],
        "metrics": {"upload_s": 0.5, "recall@10": 0.9, "precision@10": 0.8},
        "settings": [{"search": {}, "headline": "search c=1", "metrics": {"recall@10": 0.9}}],
    }
    rec = records.parse(v2)
    assert rec.tasks[0].scores == {"recall@10": 0.9, "precision@10": 0.8}
    assert rec.tasks[0].number("recall@10") == 0.9 and rec.metrics == {"upload_s": 0.5}
    assert rec.scores == {"recall@10": 0.9}
    # no setting recorded: the run's scores are its one setting's
    del v2["settings"], v2["record_version"]
    assert records.parse(v2).scores == {"recall@10": 0.9, "precision@10": 0.8}
    assert scores.title("precision@10") == "Precision@10"
    assert scores.ordered(["x", "precision@10", "recall@100", "recall@10"]) == [
        "recall@10",
        "recall@100",
        "precision@10",
    ]
