"""The score catalogue: a score added in two places (its entry, its
computation) reaches the records, the report's views, the terminal,
compare and export; records written before scores had their own field
read back with them there."""

import io

import numpy as np
import pytest
from rich.console import Console

import storebench
from storebench.report import compare, export, generic, search, terminal, views
from storebench.results import records, scores
from storebench.workloads.vector import scoring

NDCG = scores.Score("ndcg", "nDCG", short="ndcg")


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
    # the memory store is exact: every true neighbour at its place
    assert task.scores == {"recall@10": 1.0, "precision@10": 1.0, "ndcg@10": pytest.approx(1.0)}
    assert rec.scores == task.scores  # the one setting's
    (back,) = records.load(tmp_path)
    assert back.task("search c=1").scores == task.scores

    v = views.ViewInput("search", [back])
    table = search.search_table(v)[1]
    assert table.columns[:4] == ["search", "Recall@10", "Precision@10", "nDCG@10"]
    assert table.rows[0][1:4] == ["1.0000", "1.0000", "1.0000"]
    (tasks,) = [b for b in generic.tasks_table(v) if isinstance(b, views.Table)]
    assert any("ndcg@10=1.0000" in cell for row in tasks.rows for cell in row)
    assert "ndcg@10" in generic.run_metrics(v)[0].columns

    console = Console(width=200, file=io.StringIO(), record=True, color_system=None)
    console.print(terminal.run_table(back, 200))
    assert "ndcg@10=1.0000" in console.export_text()

    rows = compare.compare([back], [back]).rows
    assert [r.verdict for r in rows if r.metric == "ndcg@10"] == ["same"]
    assert export.rows([back])[-1]["ndcg@10"] == pytest.approx(1.0)


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
