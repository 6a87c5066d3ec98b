"""The one place that creates the SparkSession (nothing starts a JVM at import time)."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING

import structlog

from runner.errors import EnvironmentProblem
from runner.jvm.java_cds import ClassArchive, java_binary
from runner.jvm.java_output import relayed_java_output
from runner.jvm.java_warmup import warm_up_while_starting
from runner.spec.model import SparkSettings
from runner.spec.secrets import resolve

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

MIN_JAVA = 17
# The quick JIT compiler only (C1), for a run known to read a small input (jit_option).
QUICK_JIT = "-XX:TieredStopAtLevel=1"
# Spark's launcher JVM (spark-submit's first, building the driver's command line) lives a
# fraction of a second: the quick JIT, the serial collector and no perf-data file suit it.
LAUNCHER_OPTIONS = f"{QUICK_JIT} -XX:+UseSerialGC -XX:-UsePerfData"
# The input a run may read and still count as small: at 13 MiB (1,000,000 rows of the
# bench's parquet) C1 alone is 1.4-2x faster, at 250 MiB 2-3x slower.
SMALL_INPUT_BYTES = 32 * 2**20
# Rows in an Arrow batch to the bucket writers: bigger than Spark's 10,000, less per-batch
# overhead.
ARROW_BATCH_ROWS_SETTING = "spark.sql.execution.arrow.maxRecordsPerBatch"
ARROW_BATCH_ROWS = 100_000
# The pyspark the runner installs with (pyproject.toml pins it): keys and buckets, the Arrow
# conversions, and the connectors' and Delta's jars are tested on its Spark line alone.
PYSPARK_VERSION = "4.2.0"
JAVA_HELP = (
    "Spark needs Java {min} or newer. Install it (Debian/Ubuntu: "
    "`apt-get install -y openjdk-17-jre-headless`) or point JAVA_HOME at one."
)


def under_spark_submit() -> bool:
    """spark-submit starts the Python driver with a gateway already open."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def java_problem() -> str | None:
    """Why Spark cannot start here, or None. Saves users a Py4J stack trace."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no `java` on PATH"
        return f"Java not found ({where}). " + JAVA_HELP.format(min=MIN_JAVA)
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{java} -version` failed: {exc}. " + JAVA_HELP.format(min=MIN_JAVA)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match[1]) if match[1] != "1" else int(match[2] or 0)
    if major < MIN_JAVA:
        return f"{java} is Java {major}. " + JAVA_HELP.format(min=MIN_JAVA)
    return None


def pyspark_problem() -> str | None:
    """Why this pyspark is not the Spark line the runner runs on, or None."""
    import pyspark

    found, line = pyspark.__version__, ".".join(PYSPARK_VERSION.split(".")[:2])
    if found.split(".")[:2] == line.split("."):
        return None
    return (
        f"pyspark is {found}, and the runner runs on Spark {line} only (it installs with "
        f"pyspark {PYSPARK_VERSION}): `pip install pyspark=={PYSPARK_VERSION}`, or for a "
        "cluster an image built from the runner's Dockerfile"
    )


def spark_session(
    settings: SparkSettings,
    app_name: str,
    jars: Sequence[str] = (),
    small_input: bool = False,
    row_sources: bool = False,
) -> SparkSession:
    """Start (or join, under spark-submit) the SparkSession for a run.

    Locally the spec's master and conf apply, and `jars` (JDBC drivers) join spark.jars; a
    run known to read a small input starts its JVM with the quick JIT only (jit_option) and
    makes the first uses of the JVM parts it will need while Spark starts
    (runner/jvm/java_warmup.py; `row_sources`: it reads JSON or CSV).
    Under spark-submit, master and every conf that spark-submit set win (jars included: the
    image has them); the spec only fills in SQL settings left unset.
    """
    problem = pyspark_problem() or (None if under_spark_submit() else java_problem())
    if problem:
        raise EnvironmentProblem(problem)
    from pyspark.sql import SparkSession

    # pyspark 4.2's first Py4J call imports pyspark.testing, which warns that pandas 3 is not
    # fully supported: the runner hands Spark Arrow, never pandas (the suite runs on pandas 3)
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    conf = resolve(dict(settings.conf), where="spark.conf")
    builder = SparkSession.builder.appName(f"runner:{app_name}")
    if under_spark_submit():
        spark = builder.getOrCreate()
        for key, value in conf.items():
            if spark.conf.get(key, None) is None and spark.conf.isModifiable(key):
                spark.conf.set(key, value)
        return spark

    java = java_binary()
    archive = ClassArchive.for_java(java)  # a faster start (runner/jvm/java_cds.py)
    launcher = ClassArchive.for_java(java, jvm="launcher")
    jit = jit_option(small_input)
    builder = builder.master(settings.master)
    for key, value in _local_conf(conf, _driver_java_options(archive, jit), jars).items():
        builder = builder.config(key, value)
    log.info("spark_starting", master=settings.master, jit="quick (C1)" if jit else "full")
    if small_input:
        warm_up_while_starting(row_sources)  # first uses of the plan's JVM parts, beside the start
    # pyspark's first Py4J call imports pyspark.testing.utils, and pandas with it: 0.2 s of a
    # cold run, imported here while the main thread only waits for the JVM
    threading.Thread(
        target=importlib.import_module, args=("pyspark.testing.utils",), daemon=True
    ).start()
    with relayed_java_output(), _launcher_options(launcher):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    for started in (archive, launcher):
        if started is not None:
            started.started(spark)
    return spark


@contextlib.contextmanager
def _launcher_options(archive: ClassArchive | None) -> Iterator[None]:
    """Spark's launcher JVM started in the block with LAUNCHER_OPTIONS and its class-data
    archive (0.1 s instead of 0.25 s here), unless SPARK_LAUNCHER_OPTS is set already."""
    if "SPARK_LAUNCHER_OPTS" in os.environ:
        yield
        return
    options = [LAUNCHER_OPTIONS, archive.java_options() if archive is not None else ""]
    os.environ["SPARK_LAUNCHER_OPTS"] = " ".join(o for o in options if o)
    try:
        yield
    finally:
        del os.environ["SPARK_LAUNCHER_OPTS"]


def _local_conf(conf: dict[str, str], java_options: str, jars: Sequence[str]) -> dict[str, str]:
    """A local run's Spark settings: the runner's defaults, then the spec's (`jars` joined
    to its spark.jars)."""
    defaults = {
        "spark.driver.extraJavaOptions": java_options,
        # runner/progress.py shows the work's progress, with its stage: Spark's own bar
        # would fight its line (a spec's spark.conf may still turn it on)
        "spark.ui.showConsoleProgress": "false",
        # Spark's web UI (Jetty, about 0.3 s of each start) shows nothing a run's log and
        # summary do not, and a one-shot run is gone before anyone opens it; a spec's
        # spark.conf may turn it on (spark.ui.enabled: "true")
        "spark.ui.enabled": "false",
        # Partition paths from timestamps must not depend on the laptop's time zone.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        ARROW_BATCH_ROWS_SETTING: str(ARROW_BATCH_ROWS),
        # A cancelled task's worker ends without a traceback on the user's terminal.
        "spark.python.daemon.module": "runner.jvm.worker_daemon",
    }
    # Python workers must run the interpreter that has runner and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    listed = [j for j in conf.get("spark.jars", "").split(",") if j]
    if jars:
        conf["spark.jars"] = ",".join(dict.fromkeys([*listed, *jars]))
    return {**defaults, **conf}


def _driver_java_options(archive: ClassArchive | None, jit: str) -> str:
    """The local driver JVM's options: the runner's log4j settings, the class-data archive
    and the JIT choice."""
    log4j = resources.files("runner").joinpath("log4j2.properties")
    options = [f"-Dlog4j2.configurationFile=file:{log4j}"]
    if archive is not None:
        options.append(archive.java_options())
    options.append(jit)
    return " ".join(o for o in options if o)


def jit_option(small_input: bool) -> str:
    """The JIT compilers of a local run's JVM. Java's optimizing compiler (C2) spends a
    cold JVM's first seconds compiling Spark's planner on the second core, which the run
    needs: a run that plans and keys a small input is up to twice as fast with the quick
    compiler (C1) alone, while a large one is twice as slow without C2
    (docs/performance.md, "Small runs"). RUNNER_JAVA_JIT=quick|full overrides the choice."""
    choice = os.environ.get("RUNNER_JAVA_JIT", "auto")
    quick = choice == "quick" or (choice != "full" and small_input)
    return QUICK_JIT if quick else ""


@contextlib.contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Spark SQL settings for the queries of the block; the session's own after it."""
    saved = {key: spark.conf.get(key, None) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, before in saved.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)
