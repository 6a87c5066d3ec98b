"""Java's class-data sharing (CDS) archive for the driver JVM of local runs.

A local run's JVM loads and verifies some ten thousand classes of Spark's jars before its
first job; that is most of the seconds between `runner run` and its first row. Java can
save the loaded classes in an archive at exit (`-XX:ArchiveClassesAtExit`, JDK 13+) and
map it at the next start (`-XX:SharedArchiveFile`): Spark's start and first job then take
about 40 % less (docs/performance.md, "Small runs").

The first local run without an archive writes one, once: its JVM dumps the archive as it
exits, and the run waits for that (a few seconds, said in the log) before the archive is
put in place. One process at a time makes it (a lock file); the others run without. The
archive is kept per Java binary, Spark jars (each jar's size and time: Java checks them)
and their directory (`archive_path`), so a JVM is never handed an archive it would quietly
ignore; the archive that a new one replaces (the same Java and directory, files changed)
is removed once the new one is in place. Runs under
spark-submit (a cluster, a SparkApplication) start their JVM themselves: not here.
RUNNER_JAVA_CDS=0 turns it off; RUNNER_JAVA_CDS=use uses an archive but never writes one
(a long-lived process, such as a test session, whose exit should not wait for a dump).

Spark's launcher (org.apache.spark.launcher.Main, the JVM spark-submit runs first to build
the driver's command line) gets a small archive of its own the same way (`jvm="launcher"`):
it exits before the driver starts, so its archive is in place as soon as Spark is.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import structlog

from runner.jvm.maven import user_cache

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

# A lock older than this is stale whatever its writer's state (a writer whose process is
# gone is stale at once).
STALE_LOCK_SECONDS = 600
# How long the first run waits for its JVM to write the archive and exit.
DUMP_WAIT_SECONDS = 120
# The JVM says nothing about the archive (a mismatched one is quietly not used).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# The JVMs of a local run with an archive: the driver, and Spark's launcher before it.
Jvm = Literal["driver", "launcher"]


def cache_dir() -> Path:
    return user_cache("cds", "RUNNER_CDS_CACHE")


def archive_path(java: str, jvm: Jvm = "driver") -> Path:
    """Where the archive of this Java binary and these Spark jars is kept. Java maps an
    archive only for the very jar files it was dumped from (their paths, sizes and times):
    the same pyspark installed again (a new virtualenv, an image rebuilt) has jars of new
    times, so the key holds every jar's size and time, and such an install gets an archive
    of its own instead of one Java quietly ignores (every start then 2-3 s slower)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    listing = []
    if jars.is_dir():
        for jar in sorted(jars.glob("*.jar")):
            info = jar.stat()
            listing.append(f"{jar.name} {info.st_size} {info.st_mtime_ns}")
    java_real = os.path.realpath(java)
    stamp = os.stat(java_real).st_mtime_ns if os.path.exists(java_real) else 0
    # the jars' directory too: the archive records the class path it was dumped with, and a
    # JVM on another one (a second environment of the same pyspark) quietly ignores it
    family = _digest([java_real, str(jars.resolve())], 8)
    key = _digest([str(stamp), pyspark.__version__, *listing], 16)
    name = "spark" if jvm == "driver" else jvm
    return cache_dir() / f"{name}-{pyspark.__version__}-{family}-{key}.jsa"


def _digest(parts: list[str], length: int) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:length]


def replaced_archives(path: Path) -> list[Path]:
    """The archives of the same Java binary and jars' directory as `path`, made before its
    files changed (an upgrade of Java, pyspark installed again): no JVM maps them now."""
    family = path.name.rsplit("-", 1)[0]
    return [p for p in path.parent.glob(f"{family}-*.jsa") if p != path]


@dataclass
class ClassArchive:
    """The archive of one of this run's JVMs (`jvm`: the driver, or Spark's launcher): used
    when it exists, else (with the lock) written by this run's JVM at its exit."""

    path: Path
    writing: Path | None = None  # the archive this run's JVM dumps, if it makes one
    jvm: Jvm = "driver"

    @classmethod
    def for_java(cls, java: str | None, jvm: Jvm = "driver") -> ClassArchive | None:
        """None when turned off (RUNNER_JAVA_CDS=0) or Java is unknown."""
        mode = os.environ.get("RUNNER_JAVA_CDS", "1")
        if mode == "0" or not java:
            return None
        try:
            archive = cls(archive_path(java, jvm), jvm=jvm)
        except OSError:
            return None
        if mode != "use" and not archive.path.exists() and archive._lock():
            archive.writing = archive.path.with_suffix(f".{os.getpid()}.partial")
        return archive

    def java_options(self) -> str:
        if self.writing is not None:
            return f"-XX:ArchiveClassesAtExit={self.writing} {QUIET}"
        if self.path.exists():
            return f"-XX:SharedArchiveFile={self.path} {QUIET}"
        return ""

    def started(self, spark: SparkSession) -> None:
        """When this run writes the archive: the launcher's is dumped already (it exited
        before the driver started); the driver's at exit, its JVM ended and waited for."""
        if self.writing is None:
            return
        if self.jvm == "launcher":
            self._put_in_place(0, None)
            return
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        if proc is None:  # not a JVM this process started
            self._unlock()
            return
        atexit.register(self._finish, proc)

    def _finish(self, proc: object) -> None:
        """Close the JVM's stdin (it exits on EOF), wait for it, put the archive in place."""
        assert self.writing is not None
        started = time.perf_counter()
        log.info("java_class_archive_writing", path=str(self.path))
        code = None
        try:
            proc.stdin.close()  # type: ignore[attr-defined]
            code = proc.wait(timeout=DUMP_WAIT_SECONDS)  # type: ignore[attr-defined]
        except Exception as exc:  # never fail a run for a start-up cache
            log.warning("java_class_archive_not_written", error=str(exc))
        self._put_in_place(code, round(time.perf_counter() - started, 1))

    def _put_in_place(self, code: int | None, seconds: float | None) -> None:
        """The dumped archive in place when its JVM exited well (`code` 0) and wrote one;
        `seconds`: how long the run waited for the dump."""
        assert self.writing is not None
        try:
            if code == 0 and self.writing.exists() and self.writing.stat().st_size > 0:
                os.replace(self.writing, self.path)
                for stale in replaced_archives(self.path):  # the driver's: ~150 MB each
                    stale.unlink(missing_ok=True)
                waited = {} if seconds is None else {"seconds": seconds}
                log.info("java_class_archive_written", path=str(self.path), **waited)
        except OSError as exc:  # never fail a run for a start-up cache
            log.warning("java_class_archive_not_written", error=str(exc))
        finally:
            self.writing.unlink(missing_ok=True)
            self._unlock()

    @property
    def _lock_path(self) -> Path:
        return self.path.with_suffix(".lock")

    def _lock(self) -> bool:
        """Whether this process may write the archive (no other is writing it)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._lock_path.exists():
                if not self._lock_is_stale():
                    return False
                self._lock_path.unlink(missing_ok=True)
            fd = os.open(self._lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except OSError:
            return False
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True

    def _lock_is_stale(self) -> bool:
        """The lock's writer is gone (killed before its JVM exited), or it is old."""
        if time.time() - self._lock_path.stat().st_mtime > STALE_LOCK_SECONDS:
            return True
        try:
            os.kill(int(self._lock_path.read_text() or "0"), 0)
        except (ValueError, ProcessLookupError):
            return True
        except PermissionError:  # alive, another user's
            return False
        return False

    def _unlock(self) -> None:
        self._lock_path.unlink(missing_ok=True)


def java_binary() -> str | None:
    """The `java` Spark's launcher runs: JAVA_HOME's, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    return os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
