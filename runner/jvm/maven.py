"""JVM jars from Maven Central, copied once into a local cache.

`ensure_jars(name, coordinates)` returns the jars of `coordinates` in
`~/.cache/runner/jars/<name>/` ($RUNNER_JAR_CACHE, or $XDG_CACHE_HOME/runner/jars, moves it),
running `mvn dependency:copy` only for what is not there yet. A fetch lands in a staging
directory that is renamed into place once complete, so a killed fetch or two at once never
leave a half-copied jar where a Spark session would load it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from runner.errors import EnvironmentProblem

# Pinned, so that the fetch does not depend on the default a Maven version picks.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
FETCH_TIMEOUT_S = 900
MAVEN_HELP = "install Maven (Debian/Ubuntu: `sudo apt-get install -y maven`)"


def user_cache(name: str, override: str) -> Path:
    """`~/.cache/runner/<name>`: the environment variable `override` moves it, as
    $XDG_CACHE_HOME moves `~/.cache`."""
    if os.environ.get(override):
        return Path(os.environ[override])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "runner" / name


def cache_root() -> Path:
    return user_cache("jars", "RUNNER_JAR_CACHE")


def jar_name(coordinate: str) -> str:
    """group:artifact:version -> artifact-version.jar, the name Maven copies it under."""
    _, artifact, version = coordinate.split(":")
    return f"{artifact}-{version}.jar"


def complete(directory: Path, coordinates: Sequence[str]) -> list[str] | None:
    """The jar paths when every jar is there and is a readable zip, else None."""
    paths = [directory / jar_name(c) for c in coordinates]
    if all(p.is_file() and zipfile.is_zipfile(p) for p in paths):
        return [str(p) for p in paths]
    return None


def copy_artifacts(coordinates: Sequence[str], into: Path) -> None:
    """`mvn dependency:copy` of each coordinate into `into`; EnvironmentProblem if not."""
    for coordinate in coordinates:
        goal = [f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={coordinate}:jar"]
        # no pom.xml in `into`: Maven runs without a project
        run_maven([*goal, f"-DoutputDirectory={into}"], into, f"`mvn dependency:copy {coordinate}`")


def run_maven(args: Sequence[str], cwd: Path, what: str) -> None:
    """`mvn ARGS` (quiet, batch, checksums checked) in `cwd`; EnvironmentProblem naming
    `what` and Maven's first error when it fails."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise EnvironmentProblem(f"{what} needs `mvn`: {MAVEN_HELP}")
    cmd = [mvn, "-q", "-B", "-C", "-Dstyle.color=never", *args]
    try:
        res = subprocess.run(
            cmd,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=FETCH_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"{what} failed: {exc}") from exc
    if res.returncode != 0:
        out = re.sub(r"\x1b\[[0-9;]*m", "", res.stdout + res.stderr)  # colour codes
        errors = [ln for ln in out.splitlines() if ln.startswith("[ERROR]") and ln[8:]]
        detail = errors[0] if errors else out.strip()[-500:]
        raise EnvironmentProblem(
            f"{what} exited {res.returncode}: {detail} (Maven Central must be reachable, "
            "directly or through a mirror in ~/.m2/settings.xml)"
        )


def ensure_jars(
    name: str,
    coordinates: Sequence[str],
    prepare: Callable[[Path], None] | None = None,
) -> list[str]:
    """The jars of `coordinates` in the cache directory `name`, fetched when missing.

    `prepare(staging)` may rewrite the copied jars before they are moved into place.
    """
    final = cache_root() / name
    found = complete(final, coordinates)
    if found:
        return found
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
    try:
        copy_artifacts(coordinates, staging)
        if prepare is not None:
            prepare(staging)
        if complete(staging, coordinates) is None:
            raise EnvironmentProblem(f"Maven left incomplete jars in {staging}")
        staging.chmod(0o755)  # mkdtemp made it 0700
        if final.exists() and complete(final, coordinates) is None:
            shutil.rmtree(final, ignore_errors=True)  # an incomplete earlier copy
        # Fails when another process got there first: then its copy serves.
        with contextlib.suppress(OSError):
            staging.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    found = complete(final, coordinates)
    if found is None:
        raise EnvironmentProblem(f"the jars in {final} are incomplete after fetching them")
    return found


def copy_into(jars: Sequence[str], into: Path) -> list[str]:
    """Copies of `jars` in `into` (docker/jars for an image), made where missing."""
    into.mkdir(parents=True, exist_ok=True)
    copied = []
    for jar in jars:
        target = into / Path(jar).name
        if not (target.exists() and target.stat().st_size == Path(jar).stat().st_size):
            shutil.copyfile(jar, target)
        copied.append(str(target))
    return copied
