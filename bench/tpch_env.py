"""The TPC-H generator of bench/tpch.py: `tpchgen-cli` (PyPI, a Rust binary in a wheel),
installed once into a directory of the bench's own, never into the runner's virtualenv.

`tpchgen()` returns the binary, cached under ~/.cache/runner/bench-tpch/ ($RUNNER_BENCH_TPCH_CACHE
or $XDG_CACHE_HOME moves it) and made on first use with `pip install --target` (PyPI must be
reachable, directly or through pip's configured index). Like bench/hudi_env.py it is built in
a staging directory renamed into place once complete, so a half-made one is never used.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

from bench.hudi_env import SideEnvironmentProblem, run_step
from runner.jvm.maven import user_cache

TPCHGEN = "tpchgen-cli==4.0.0"
ENV_NAME = "tpchgen-cli-4.0.0"  # a new pin gets a new directory, never a mixed one
BINARY = Path("bin") / "tpchgen-cli"
TIMEOUT_S = 600


def tpchgen(root: Path | None = None) -> Path:
    """The tpchgen-cli binary, installed once (SideEnvironmentProblem when it cannot be)."""
    final = (root or user_cache("bench-tpch", "RUNNER_BENCH_TPCH_CACHE")) / ENV_NAME
    if (final / BINARY).is_file():
        return final / BINARY
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{ENV_NAME}-", dir=final.parent))
    try:
        print(f"tpch: installing {TPCHGEN} into {final} (once)", flush=True)
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        _run([*cmd, "--target", str(staging), TPCHGEN], f"pip install {TPCHGEN}")
        staging.chmod(0o755)  # mkdtemp made it 0700
        with contextlib.suppress(OSError):  # another process got there first: its copy serves
            staging.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not (final / BINARY).is_file():
        raise SideEnvironmentProblem(f"{final / BINARY} is missing after `pip install`")
    return final / BINARY


def generate(binary: Path, scale_factor: float, out: Path) -> Path:
    """TPC-H `lineitem` at `scale_factor` as parquet files under out/lineitem/, one per
    100 MB or so of the table (at least one)."""
    parts = max(1, round(scale_factor * 2))
    cmd = [str(binary), "parquet", "-s", str(scale_factor), "-T", "lineitem", "-q"]
    _run([*cmd, "-p", str(parts), "-o", str(out), "--overwrite"], "tpchgen-cli parquet")
    return out / "lineitem"


def _run(cmd: list[str], what: str) -> None:
    run_step(cmd, what, TIMEOUT_S)
