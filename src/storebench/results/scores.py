"""The scores a search records, one catalogue: each one's name, unit, which
way is better and how it prints. Records hold them in ``scores`` (a task's,
a search setting's), keyed ``name@k`` (``recall@10``), a peer's rule of the
same score with its name after k (``recall@10 (ann-benchmarks)``); scoring,
records, the views, ``compare`` and ``export`` read what a score is here.

Adding a score takes its entry here (``register``) and its computation in
``workloads/vector/scoring.py`` (``COMPUTATIONS``, under the same name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Score:
    name: str  # keys are name@k; a peer's rule: "recall (ann-benchmarks)", keys recall@10 (...)
    title: str  # in headers and axis labels: Recall@10, Recall@10 (ann-benchmarks)
    k: int | None = None  # scored at this k whatever the search's (recall@1)
    unit: str = "fraction"  # a fraction of hits: compare's interval is binomial
    higher_is_better: bool = True
    digits: int = 4
    short: str = ""  # a narrow terminal's header word
    priority: int = 4  # how long a narrow terminal keeps its column (lower: longer)

    def key(self, k: int) -> str:
        stem, space, rule = self.name.partition(" ")
        return f"{stem}@{self.k or k}{space}{rule}"

    def text(self, value: Any) -> str:
        return f"{value:.{self.digits}f}" if isinstance(value, int | float) else "-"


CATALOGUE: dict[str, Score] = {}


def register(score: Score) -> Score:
    CATALOGUE[score.name] = score
    return score


RECALL = register(Score("recall", "Recall", short="rec", priority=1))
register(Score("precision", "Precision", short="prec"))
# the peers' recall, for figures compared with theirs (docs/reports.md, "Scores")
register(Score("recall (ann-benchmarks)", "Recall"))
register(Score("recall (VectorDBBench)", "Recall"))

# name@k, a peer's rule after k, then what a run metric adds (recall@10_tuned)
_KEY = re.compile(r"(?P<stem>[^@]+)@(?P<k>\d*)(?P<rule> \([^)]*\))?(?P<rest>.*)")


def of(key: str) -> Score | None:
    """The entry a key names (``recall@10``, and a run metric named after
    one, ``recall@10_tuned``); None for other keys."""
    m = _KEY.fullmatch(key)
    return CATALOGUE.get(m["stem"] + (m["rule"] or "")) if m else None


def k_of(key: str) -> int | None:
    m = _KEY.fullmatch(key)
    return int(m["k"]) if m and m["k"] and not m["rest"] else None


def is_key(key: str) -> bool:
    return of(key) is not None and k_of(key) is not None


def title(key: str) -> str:
    score = of(key)
    return key if score is None else score.title + key[len(score.name.partition(" ")[0]) :]


def ordered(keys: Iterable[str], score: Score | None = None) -> list[str]:
    """The score keys among ``keys`` (of ``score`` only, if given), once
    each, in the catalogue's order, then by k."""
    entries = list(CATALOGUE.values())
    found = {k for k in keys if is_key(k) and score in (None, of(k))}
    return sorted(found, key=lambda k: (entries.index(of(k)), k_of(k)))


def first(scores: Mapping[str, Any], score: Score = RECALL) -> str | None:
    keys = ordered(scores, score)
    return keys[0] if keys else None


def text(key: str, value: Any) -> str:
    """A score's value as it prints; ``-`` for none."""
    return (of(key) or Score(key, key)).text(value)
