"""Java's class-data archive of local runs (runner/jvm/java_cds.py): which run writes it, which
use it, and the lock between them; no JVM is started here (the e2e runs use the archive)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from runner.jvm.java_cds import ClassArchive, java_binary


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_CDS_CACHE", str(tmp_path))
    monkeypatch.delenv("RUNNER_JAVA_CDS", raising=False)
    return tmp_path


def _archive() -> ClassArchive:
    archive = ClassArchive.for_java(java_binary() or sys.executable)
    assert archive is not None
    return archive


def test_the_first_run_writes_the_archive_and_the_others_wait_for_it(cache):
    first = _archive()
    assert first.writing is not None and f"-XX:ArchiveClassesAtExit={first.writing}" in (
        first.java_options()
    )
    second = _archive()  # while the first writes: neither writes nor uses one
    assert second.writing is None and second.java_options() == ""

    first.writing.write_bytes(b"archive")  # what the first JVM dumps at its exit
    first.path.write_bytes(b"archive")
    first._unlock()
    third = _archive()
    assert third.writing is None
    assert third.java_options().startswith(f"-XX:SharedArchiveFile={first.path} ")


def test_a_lock_whose_writer_is_gone_is_taken_over(cache):
    first = _archive()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    first._lock_path.write_text(dead.stdout.strip())  # a writer killed before its JVM exited
    again = _archive()
    assert again.writing is not None
    assert again._lock_path.read_text() == str(os.getpid())


def test_off_and_use_only(cache, monkeypatch):
    monkeypatch.setenv("RUNNER_JAVA_CDS", "0")
    assert ClassArchive.for_java(java_binary() or sys.executable) is None
    monkeypatch.setenv("RUNNER_JAVA_CDS", "use")  # a test session: never writes
    archive = _archive()
    assert archive.writing is None and archive.java_options() == ""
    assert not list(cache.iterdir())  # no lock taken


def test_each_environment_of_one_spark_version_has_its_own_archive(cache, tmp_path, monkeypatch):
    """The archive records the class path it was dumped with: a second environment with the
    same pyspark (another venv) would map the first's archive and quietly ignore it."""
    import pyspark

    from runner.jvm.java_cds import archive_path

    java = java_binary() or sys.executable
    here = archive_path(java)
    other = tmp_path / "other-venv" / "pyspark"
    (other / "jars").mkdir(parents=True)
    for name in os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars")):
        (other / "jars" / name).touch()  # the same jar names, another directory
    monkeypatch.setattr(pyspark, "__file__", str(other / "__init__.py"))
    assert archive_path(java) != here


def test_jars_installed_again_get_a_new_archive_and_the_old_one_goes(cache, tmp_path, monkeypatch):
    """Java maps an archive only for the jar files it was dumped from (sizes and times): the
    same pyspark installed again (a new virtualenv) must not be handed the old archive, which
    Java would quietly ignore at every start; the old one is removed once the new is in place."""
    import pyspark

    from runner.jvm.java_cds import archive_path

    install = tmp_path / "venv" / "pyspark"
    (install / "jars").mkdir(parents=True)
    (install / "jars" / "spark-core.jar").write_bytes(b"jar")
    monkeypatch.setattr(pyspark, "__file__", str(install / "__init__.py"))
    first = _archive()
    first.writing.write_bytes(b"archive")
    first._finish(_exited_jvm())
    assert first.path.exists()

    os.utime(install / "jars" / "spark-core.jar", ns=(1, 1))  # installed again: new times
    java = java_binary() or sys.executable
    assert archive_path(java) != first.path
    second = _archive()
    assert second.writing is not None  # this run writes the new install's archive
    second.writing.write_bytes(b"archive")
    second._finish(_exited_jvm())
    assert second.path.exists() and not first.path.exists()


def _exited_jvm() -> SimpleNamespace:
    """A driver JVM that has dumped its archive and exited."""
    return SimpleNamespace(stdin=SimpleNamespace(close=lambda: None), wait=lambda timeout: 0)


def test_the_launcher_has_an_archive_of_its_own_in_place_once_spark_is(cache):
    """Spark's launcher JVM exits before the driver starts: the run that writes its archive
    puts it in place as soon as the session is up, beside (not instead of) the driver's."""
    java = java_binary() or sys.executable
    driver = ClassArchive.for_java(java)
    launcher = ClassArchive.for_java(java, jvm="launcher")
    assert driver is not None and launcher is not None
    assert launcher.path != driver.path and launcher.path.name.startswith("launcher-")
    assert launcher.writing is not None and driver.writing is not None  # both: first run
    launcher.writing.write_bytes(b"archive")  # what the launcher dumped at its exit
    launcher.started(spark=None)  # type: ignore[arg-type]
    assert launcher.path.read_bytes() == b"archive" and not launcher._lock_path.exists()
    again = ClassArchive.for_java(java, jvm="launcher")
    assert again is not None and again.writing is None
    assert again.java_options().startswith(f"-XX:SharedArchiveFile={launcher.path} ")
