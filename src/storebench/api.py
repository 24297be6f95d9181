"""The Python API: the same runs as the CLI, returning the result records."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storebench.plan.scenario import Scenario
from storebench.run.runner import run_scenario


def run(
    scenario: str = "crud",
    stores: Sequence[str] = (),
    set: Sequence[str] | dict[str, Any] = (),  # noqa: A002  (mirrors the CLI's --set)
    results_dir: str | Path = "results",
    resume: bool = False,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Run a scenario (built-in name or YAML path) and return its records,
    in their JSON form (``storebench.results.records.RunRecord.model_validate``
    types one; ``storebench.results.records.load`` reads result files typed).

    ``set`` takes ``["n=1000"]`` or ``{"n": 1000}``; ``stores`` takes engine
    names or ``engine=url``. Records are also appended under ``results_dir``."""
    from storebench.run.progress import make_progress

    if isinstance(set, dict):  # typed already: not parsed as YAML again
        sc = Scenario.load(scenario, [], list(stores), values=dict(set))
    else:
        sc = Scenario.load(scenario, list(set), list(stores))
    bar = make_progress(progress)
    try:
        return [r.to_dict() for r in run_scenario(sc, Path(results_dir), bar, resume)]
    finally:
        bar.close()
