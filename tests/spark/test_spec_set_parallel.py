"""`runner run DIR --parallel N` in one application (the tests' shared session): specs run at
once where no upstream holds them, a chain still in its order, every table right."""

from __future__ import annotations

import json
import re

from tests.cli_in_process import run_cli
from tests.helpers import read_table
from tests.unit.test_spec_set import _spec


def test_independent_specs_run_at_once_and_a_chain_in_its_order(spark, tmp_path, monkeypatch):
    for module in ("runner.commands.spec_set_run", "runner.pipeline.inputs"):
        monkeypatch.setattr(f"{module}.spark_session", lambda *args, **kwargs: spark)
    folder = tmp_path / "specs"
    folder.mkdir()
    _spec(folder, "a_silver", "silver", reads="bronze")
    _spec(folder, "bronze", "bronze")
    for name in ("alpha", "bronze", "zeta"):
        inbox = tmp_path / "inbox" / name
        inbox.mkdir(parents=True)
        rows = [json.dumps({"id": i, "ts": 1}) for i in range(5)]
        (inbox / "1.json").write_text("\n".join(rows) + "\n")
    _spec(folder, "alpha", "alpha")
    _spec(folder, "zeta", "zeta")
    done = run_cli("run", str(folder), "--parallel", "3")
    assert done.returncode == 0, done.stderr
    assert "4 spec(s), up to 3 at once: alpha, bronze, silver, zeta" in done.stdout
    table = done.stdout.splitlines()[-6:]
    assert [line.split()[:2] for line in table[1:-1]] == [
        ["alpha", "committed"],
        ["bronze", "committed"],
        ["silver", "committed"],  # after bronze: it read bronze's five rows
        ["zeta", "committed"],
    ]
    assert re.match(r"4 spec\(s\): 4 committed", table[-1])
    # the three with no upstream started before any run ended: they ran at once
    events = [
        line for line in done.stderr.splitlines() if "run_started" in line or "run_finished" in line
    ]
    first_end = next(i for i, line in enumerate(events) if "run_finished" in line)
    started = {
        m[1] for line in events[:first_end] if (m := re.search(r'"pipeline": "(\w+)"', line))
    }
    assert {"alpha", "bronze", "zeta"} <= started
    for name in ("alpha", "bronze", "silver", "zeta"):
        assert sorted(read_table(tmp_path / "tables" / name)["id"]) == list(range(5))
    refused = run_cli("run", str(folder / "alpha.yaml"), "--parallel", "2")
    assert refused.returncode == 2 and "--parallel choose among a set" in refused.stderr
