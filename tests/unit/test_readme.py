"""The README a newcomer reads names what the install has: every built-in
scenario, every command and every option of ``show``, and the extra a
command needs; ``make demo`` runs what the README says it runs."""

import re
from pathlib import Path

from storebench.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_built_in_scenario_is_in_the_scenario_table():
    scenarios = sorted(p.stem for p in (ROOT / "src/storebench/scenarios").glob("*.yaml"))
    table = set(re.findall(r"^\| `([\w-]+)` \|", README, re.M))
    assert set(scenarios) <= table, set(scenarios) - table


def test_every_command_and_show_option_is_named():
    for name in cli.commands:
        assert f"storebench {name}" in README, name
    common = {"--json", "--verbose", "--quiet"}  # said once, for every command
    for opt in cli.commands["show"].params:
        for flag in (f for f in opt.opts if f.startswith("--") and f not in common):
            assert f"show results/ {flag}" in README or f"show {flag}" in README, flag
    assert "pip install 'storebench[report]'" in README  # report needs its extra


def demo_run() -> str:
    """The ``storebench run`` line of the Makefile's demo, continuations joined."""
    make = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    demo = re.search(r"^demo:\n((?:\t.*\n)+)", make, re.M).group(1)
    return next(line.strip() for line in demo.splitlines() if "storebench run" in line)


def test_the_demo_runs_what_the_readme_says():
    run = demo_run()
    ops = re.search(r"--set ops=(\d+)", run)
    said = re.search(r"for 10,000 documents, (\d+)\s+operations per task", README)
    assert ops and said and ops.group(1) == said.group(1)
    stores = re.search(r"--store ([\w,-]+)", run).group(1).split(",")
    line = next(ln for ln in README.splitlines() if ln.startswith("make demo "))
    assert re.search(r"on " + ", ".join(stores[:-1]) + f" and {stores[-1]} ", line), line
    ef = re.search(r"grid\.search\.ef=\[([\d,]+)\]", run).group(1).split(",")
    assert f"searched at ef {', '.join(ef[:-1])} and {ef[-1]}:" in " ".join(README.split())
