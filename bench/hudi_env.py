"""The side environment of bench/hudi.py: pyspark 3.5 and Hudi's Spark bundle, made once.

Hudi 1.1.1's Spark bundle runs on Spark 3.5, the runner on Spark 4.2, so the two cannot
share a JVM or a virtualenv. `side_environment()` returns the bench's own second
environment, cached under ~/.cache/runner/bench-hudi/ ($RUNNER_BENCH_HUDI_CACHE or
$XDG_CACHE_HOME moves it) and made
on first use, nothing of it in the runner's dependencies:
- a virtualenv made by the bench's Python (`python -m venv`), with `pip install
  pyspark==3.5.*` (the newest 3.5.x pip resolves);
- the jar org.apache.hudi:hudi-spark3.5-bundle_2.12:1.1.1, fetched from Maven Central with
  `mvn dependency:copy` (runner/jvm/maven.py);
- ready.json, written last: the pyspark version and both paths.
It is built in a staging directory renamed into place once complete, so a half-made
environment is never used; a failed pip or Maven step raises SideEnvironmentProblem with
the tool's own error.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from runner.jvm.maven import user_cache

PYSPARK = "pyspark==3.5.*"
HUDI_BUNDLE = "org.apache.hudi:hudi-spark3.5-bundle_2.12:1.1.1"
ENV_NAME = "spark3.5-hudi1.1.1"  # a new pin gets a new directory, never a mixed one
READY = "ready.json"  # written last into a staged environment: its presence marks it complete
PIP_TIMEOUT_S = 1800  # pyspark 3.5 is a ~300 MB sdist


class SideEnvironmentProblem(RuntimeError):
    """The side environment cannot be made (no network, no Maven, pip failed)."""


@dataclass(frozen=True)
class SideEnvironment:
    """A complete side environment: its Python, pyspark's version and the Hudi bundle."""

    python: Path
    pyspark: str
    jar: Path


def env_root() -> Path:
    return user_cache("bench-hudi", "RUNNER_BENCH_HUDI_CACHE")


def load_environment(directory: Path) -> SideEnvironment | None:
    """The environment in `directory` if complete (ready.json, python, a readable jar)."""
    try:
        ready = json.loads((directory / READY).read_text())
    except (OSError, ValueError):
        return None
    env = SideEnvironment(directory / ready["python"], ready["pyspark"], directory / ready["jar"])
    if env.python.exists() and zipfile.is_zipfile(env.jar):
        return env
    return None


def side_environment(root: Path | None = None) -> SideEnvironment:
    """The side environment, made once: built in a staging directory that is renamed into
    place when complete, so a killed build or two at once never leave a half one in use."""
    final = (root or env_root()) / ENV_NAME
    found = load_environment(final)
    if found:
        return found
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{ENV_NAME}-", dir=final.parent))
    try:
        print(f"hudi: making the side environment in {final} (once; ~300 MB)", flush=True)
        _build(staging)
        if final.exists() and load_environment(final) is None:
            shutil.rmtree(final, ignore_errors=True)  # an incomplete earlier one
        with contextlib.suppress(OSError):  # another process got there first: its copy serves
            staging.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    found = load_environment(final)
    if found is None:
        raise SideEnvironmentProblem(f"the side environment in {final} is incomplete")
    return found


def _build(staging: Path) -> None:
    """The virtualenv (pyspark 3.5), the bundle jar, then ready.json, into `staging`.

    The venv works once renamed: its python finds pyvenv.cfg beside itself, and nothing
    here runs the scripts whose shebangs name the staging path."""
    from runner.errors import EnvironmentProblem
    from runner.jvm.maven import copy_artifacts

    python = staging / "venv" / "bin" / "python"
    _run([sys.executable, "-m", "venv", str(staging / "venv")], "python -m venv")
    _run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", PYSPARK],
        f"pip install {PYSPARK}",
    )
    version = _run(
        [str(python), "-c", "import pyspark; print(pyspark.__version__)"], "import pyspark"
    ).strip()
    jars = staging / "jars"
    jars.mkdir()
    try:
        copy_artifacts([HUDI_BUNDLE], jars)
    except EnvironmentProblem as exc:
        raise SideEnvironmentProblem(f"the Hudi bundle cannot be fetched: {exc}") from exc
    (jar,) = jars.glob("*.jar")
    ready = {"python": "venv/bin/python", "pyspark": version, "jar": f"jars/{jar.name}"}
    (staging / READY).write_text(json.dumps(ready, indent=2) + "\n")
    staging.chmod(0o755)  # mkdtemp made it 0700


def _run(cmd: list[str], what: str) -> str:
    hint = " (PyPI must be reachable, directly or through pip's configured index)"
    return run_step(cmd, what, PIP_TIMEOUT_S, hint)


def run_step(cmd: list[str], what: str, timeout_s: float, hint: str = "") -> str:
    """A step of a side environment's build (pip, venv, a generator); its stdout, or
    SideEnvironmentProblem with its output's tail when it fails."""
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SideEnvironmentProblem(f"`{what}` failed: {exc}") from exc
    if done.returncode:
        tail = (done.stdout + done.stderr).strip()[-1500:]
        raise SideEnvironmentProblem(f"`{what}` exited {done.returncode}{hint}:\n{tail}")
    return done.stdout
