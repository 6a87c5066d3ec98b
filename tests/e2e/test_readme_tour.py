"""The README's five-minute tour, run as a new user runs it: its commands and what they print.

The tour is the README's section "Five-minute tour". Each ```console block holds commands
(`$ .venv/bin/runner ...`) and, below each one, the lines it prints; a `# exit N` comment
on a command is its exit code (0 otherwise). The test runs the commands in order in a copy
of pipelines/ (the same relative paths as the README, `python -m runner` for
`.venv/bin/runner`) and finds every line the README shows in what the command printed, in
order: versions, rows, files, buckets and exit codes must match. Timings, sizes, skew,
instants and run ids vary from run to run: every decimal number, 17-digit instant and run
id is masked on both sides, and the working directory is the README's `/…`. Where a block
elides nothing (no `…` line), every line the command printed on stdout must be in the
README too, so a new output line fails the test until the README shows it.

Not run: `docker` and `chmod` (tests/e2e/test_image.py builds and runs the image with a
Docker engine of its own) and `runner fetch-jars` (a 650 MB Maven download). The tour's
first steps (validate, keys) do not touch the table, so running them before the quickstart
run, in the README's order, is the state of a user who ran `./dev quickstart` first.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RUNNER_IN_README = ".venv/bin/runner"
NOT_RUN = ("fetch-jars",)  # runner commands that need a network download
ELIDED = "…"


@dataclass(frozen=True)
class Command:
    """One `$ ...` line of the tour and the lines the README shows below it."""

    line: str
    expected: tuple[str, ...]
    exit_code: int
    elides: bool


def _tour() -> str:
    text = README.read_text()
    start = text.index("## Five-minute tour")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _blocks(tour: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block of the tour, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", tour, flags=re.M | re.S)


def _commands(body: str) -> list[Command]:
    commands: list[Command] = []
    line, lines = None, []
    for row in [*body.splitlines(), "$ "]:
        if not row.startswith("$ "):
            lines.append(row)
            continue
        if line:
            code = re.search(r"#\s*exit (\d+)", line)
            commands.append(
                Command(line, tuple(lines), int(code.group(1)) if code else 0, ELIDED in lines)
            )
        line, lines = row[2:].strip(), []
    return commands


def _normal(line: str, work: Path) -> str:
    """A printed line with what varies masked: the working directory, instants, run ids and
    every decimal number (seconds, KiB, skew); runs of spaces are one space."""
    for directory in {str(work.resolve()), str(work)}:
        line = line.replace(directory, "/" + ELIDED)
    line = re.sub(r"\b\d{17}\b", "<instant>", line)
    line = re.sub(r"\brun [0-9a-f]{12}\b", "run <id>", line)
    line = re.sub(r"\d+\.\d+", "<n>", line)
    return " ".join(line.split())


def _printed(done: subprocess.CompletedProcess[str]) -> tuple[list[str], list[str]]:
    """stdout's lines, and stderr's without the JSON log lines."""
    stderr = []
    for line in done.stderr.splitlines():
        try:
            json.loads(line)
        except json.JSONDecodeError:
            stderr.append(line)
    return done.stdout.splitlines(), stderr


def _run(command: Command, work: Path) -> None:
    shell = command.line.replace(RUNNER_IN_README, f"{shlex.quote(sys.executable)} -m runner", 1)
    done = subprocess.run(
        ["bash", "-c", shell], cwd=work, capture_output=True, text=True, timeout=300
    )
    stdout, stderr = _printed(done)
    said = f"$ {command.line}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == command.exit_code, said
    actual = [_normal(line, work) for line in stdout + stderr if line.strip()]
    expected = [_normal(line, work) for line in command.expected if line.strip()]
    position = 0
    for line in expected:
        if line == ELIDED:
            continue
        found = actual.index(line, position) if line in actual[position:] else -1
        assert found >= 0, f"the README's line is not printed (in this order): {line!r}\n{said}"
        position = found + 1
    if not command.elides:
        shown = set(expected)
        new = [
            line for line in (_normal(s, work) for s in stdout if s.strip()) if line not in shown
        ]
        assert not new, f"printed, but not in the README: {new}\n{said}"


def _check_python(body: str, namespace: dict[str, object]) -> None:
    """Run the block line by line; a line whose comment is a Python literal must give it."""
    for line in body.splitlines():
        code, _, comment = line.partition("#")
        if not code.strip():
            continue
        try:
            expected = ast.literal_eval(comment.strip())
        except (ValueError, SyntaxError):
            exec(code, namespace)
            continue
        assert eval(code, namespace) == expected, line


def test_the_tour_prints_what_the_readme_shows(tmp_path, monkeypatch):
    shutil.copytree(
        ROOT / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    monkeypatch.chdir(tmp_path)  # the tour's Python reads the table by its relative path
    ran, skipped = [], []
    for language, body in _blocks(_tour()):
        if language == "python":
            _check_python(body, {})
        if language != "console":
            continue
        for command in _commands(body):
            words = command.line.split()
            if words[0] != RUNNER_IN_README or words[1] in NOT_RUN:
                skipped.append(command.line)
                continue
            _run(command, tmp_path)
            ran.append(command.line)
    # the tour's steps, so that a README that lost its console blocks does not pass
    assert len(ran) >= 10, ran
    assert all(line.split()[0] in ("docker", "chmod") or "fetch-jars" in line for line in skipped)


def test_the_tour_spec_is_the_bundled_one():
    """The spec the tour shows (comments aside) is pipelines/quickstart.yaml."""
    shown = next(
        body for language, body in _blocks(_tour()) if body.startswith("# pipelines/quickstart")
    )
    bundled = (ROOT / "pipelines" / "quickstart.yaml").read_text()
    assert yaml.safe_load(shown) == yaml.safe_load(bundled)
