"""A result file stays readable whatever a failed write left, and every
later record lands on a line of its own (results/files.py)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storebench.errors import UserError
from storebench.results import files


def _rec(i: int) -> dict:
    return {"run_id": f"r{i}", "status": "ok", "pad": "x" * 200}


def test_a_torn_tail_is_set_aside_and_the_next_record_lands_whole(tmp_path, caplog):
    path = tmp_path / "crud.jsonl"
    files.append(path, _rec(1))
    with open(path, "ab") as f:  # what a write cut short leaves
        f.write(b'{"run_id": "r2", "stat')
    assert [r["run_id"] for r in files.read(path)] == ["r1"]  # readable: the tail is skipped
    files.append(path, _rec(3))
    assert [r["run_id"] for r in files.read(path)] == ["r1", "r3"]
    assert path.read_bytes().endswith(b"\n")
    damaged = tmp_path / "crud.jsonl.damaged"
    assert damaged.read_bytes() == b'{"run_id": "r2", "stat\n'
    assert "torn last line" in caplog.text


def test_a_damaged_line_inside_the_file_is_still_an_error(tmp_path):
    path = tmp_path / "crud.jsonl"
    path.write_text('{"run_id": "r1"\n' + json.dumps(_rec(2)) + "\n")
    with pytest.raises(UserError, match=r"crud.jsonl:1: not a JSON record"):
        list(files.read(path))


def test_a_full_disk_leaves_no_partial_line_and_keeps_the_record(tmp_path):
    """A file-size limit stands in for a full disk (the write is cut short
    or refused); the record is kept where the one-line error says."""
    path = tmp_path / "crud.jsonl"
    files.append(path, _rec(1))
    size = path.stat().st_size
    code = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({size + 100}, {size + 100}))
        from pathlib import Path
        from storebench.errors import UserError
        from storebench.results import files
        try:
            files.append(Path({str(path)!r}), {_rec(2)!r})
        except UserError as exc:
            print(exc)
            sys.exit(3)
    """)
    env = os.environ | {"TMPDIR": str(tmp_path)}  # where the record is kept: the test's own
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert r.returncode == 3, r.stderr
    assert "the record could not be written" in r.stdout and "kept in " in r.stdout
    assert path.stat().st_size == size  # undone to the last whole line
    kept = r.stdout.strip().rsplit("kept in ", 1)[1]
    assert Path(kept).parent == tmp_path
    assert [x["run_id"] for x in files.read(kept)] == ["r2"]
    files.append(path, _rec(3))
    assert [x["run_id"] for x in files.read(path)] == ["r1", "r3"]


def test_a_directory_is_read_with_its_subdirectories(tmp_path):
    files.append(tmp_path / "a.jsonl", _rec(1))
    files.append(tmp_path / "monday" / "b.jsonl", _rec(2))
    (tmp_path / "empty").mkdir()
    assert sorted(r["run_id"] for r in files.read(tmp_path)) == ["r1", "r2"]
    with pytest.raises(UserError, match="no \\*.jsonl result files here or below"):
        list(files.read(tmp_path / "empty"))
