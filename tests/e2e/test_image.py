"""The container image, built and run with a real Docker engine, as a user would.

No base image can be pulled here, so the test makes one: debootstrap from the Debian mirror
apt uses (cached under tmp/cache/ of the checkout), `docker import`, then the Dockerfile with
`--build-arg BASE_IMAGE=` that image and the host's CA bundle through the extra-CA hook. It
starts its own dockerd (own data root, exec root, pid file and socket, no bridge, no iptables
changes) and stops it at the end. The data root is kept in the cache (for the run that
holds its lock: a run beside it gets a private one), and the base image imported once per
tarball, so a rebuild after a change to the runner's code reuses the
layers before it (Java, the dependencies: most of a build's two minutes); the module's
tests run on one pytest worker, one dockerd and one build. Skips only where no engine can
start (not root, no dockerd and no way to install it, a daemon that does not come up).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

import pandas as pd
import pytest
import yaml
from deltalake import DeltaTable

from tests.s3 import connector_jars, moto_server, s3_environment

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("RUNNER_TEST_CACHE", ROOT / "tmp" / "cache"))
SUITE = "bookworm"  # the Debian release of the Dockerfile's default base image
BASE_TAG = "runner-base:e2e"
IMAGE = "runner:e2e"
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")

# one worker for the module: one dockerd on the cached data root, one build
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.xdist_group("docker-image"),
]


def _run(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


def _tools() -> tuple[str, str]:
    """dockerd and debootstrap (`./dev test` installs them as root with apt-get)."""
    found = [shutil.which(tool, path=SBIN_PATH) for tool in ("dockerd", "debootstrap")]
    if not all(found):
        pytest.skip(
            "no dockerd/debootstrap: `./dev test` installs them when run as root with apt-get; "
            "or `sudo apt-get install -y docker.io debootstrap`"
        )
    return found[0], found[1]  # type: ignore[return-value]


def _client(dockerd: str) -> str:
    """The docker client of the same package as dockerd (its API version matches)."""
    beside = Path(dockerd).parent.parent / "bin" / "docker"
    return str(beside) if beside.exists() else shutil.which("docker") or "docker"


@pytest.fixture(scope="module")
def docker(tmp_path_factory):
    """A private dockerd for this module; yields a function that runs the docker client."""
    if os.geteuid() != 0:
        pytest.skip("starting dockerd needs root")
    dockerd, _ = _tools()
    home = tmp_path_factory.mktemp("docker")
    sock, log = home / "docker.sock", home / "dockerd.log"
    # the cached data root (the layers of earlier builds are the build cache) for the run
    # that holds its lock; another run at the same time gets a private one
    CACHE.mkdir(parents=True, exist_ok=True)
    lock: IO[str] | None = (CACHE / "docker-data.lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        data, pidfile = CACHE / "docker-data", CACHE / "docker-data.pid"
        _stop_left_behind(pidfile)  # the dockerd of a run killed before its teardown
        _unmount_under(data)  # and its containers' layers, if it was killed too
    except BlockingIOError:
        lock.close()
        lock = None
        data, pidfile = home / "data", home / "docker.pid"
    data.mkdir(parents=True, exist_ok=True)
    command = [dockerd, "--data-root", str(data), "--exec-root", str(home / "exec")]
    command += ["--pidfile", str(pidfile), "-H", f"unix://{sock}"]
    command += ["--bridge", "none", "--iptables=false"]
    with log.open("w") as out:
        daemon = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    env = {**os.environ, "DOCKER_HOST": f"unix://{sock}"}
    client = _client(dockerd)

    def docker_cmd(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return _run([client, *args], timeout, env=env)

    try:
        deadline = time.monotonic() + 60
        while docker_cmd("info", timeout=30).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"dockerd did not start: {log.read_text()[-800:]}")
            time.sleep(0.5)
        docker_cmd("container", "prune", "--force")  # an earlier run's stopped containers
        yield docker_cmd
    finally:
        if daemon.poll() is None:
            # what the run left: its containers, and the images a new build untagged
            docker_cmd("container", "prune", "--force")
            docker_cmd("image", "prune", "--force")
        _stop(daemon.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.wait(timeout=10)  # reaped
        _unmount_under(home)
        _unmount_under(data)
        shutil.rmtree(home, ignore_errors=True)
        if lock is not None:
            lock.close()


def _stop_left_behind(pidfile: Path) -> None:
    """Stop the dockerd whose pid the cached data root's pid file holds, if one still runs
    (its run was killed: pytest's teardown never came)."""
    try:
        pid = int(pidfile.read_text())
        if Path(f"/proc/{pid}/comm").read_text().strip() != "dockerd":
            return
    except (OSError, ValueError):
        return
    _stop(pid)


def _stop(pid: int) -> None:
    """SIGTERM, then SIGKILL if it still runs 30 s later; a dockerd of this run or of one
    killed before (not a child: polled, not waited for)."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not _alive(pid):
            return


def _alive(pid: int) -> bool:
    try:  # the state field after the command's parentheses; Z: exited, not yet reaped
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _unmount_under(home: Path) -> None:
    """dockerd leaves its network namespace mounted in the exec root (and, killed, its
    containers' layers in the data root)."""
    points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((p for p in points if p.startswith(f"{home}/")), reverse=True):
        _run(["umount", "-l", point], 30)


def _apt_mirror() -> str:
    """The Debian mirror apt uses for the main suite (deb822 or one-line sources)."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for file in files:
        if not file.is_file():
            continue
        text = file.read_text(errors="replace")
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and SUITE in suites.group(1).split():
                return uris.group(1)
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and SUITE in parts[2:3]:
                return next(p for p in parts[1:] if "://" in p)
    return "http://deb.debian.org/debian"


def _base_tarball(workdir: Path) -> Path:
    """A minimal Debian with python3 and venv, made once per cache (about 45 s)."""
    tarball = CACHE / f"debootstrap-{SUITE}-minbase.tar"
    if tarball.exists():
        return tarball
    _, debootstrap = _tools()
    rootfs = workdir / "rootfs"
    include = "--include=python3,python3-pip,python3-venv,ca-certificates"
    command = [debootstrap, "--variant=minbase", include, SUITE, str(rootfs), _apt_mirror()]
    done = _run(command, 900)
    assert done.returncode == 0, f"debootstrap failed: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    _run(["chroot", str(rootfs), "apt-get", "clean"], 120)
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial")
    done = _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], 300)
    assert done.returncode == 0, done.stderr
    partial.rename(tarball)
    shutil.rmtree(rootfs, ignore_errors=True)
    return tarball


def _context(workdir: Path) -> Path:
    """The checkout as a build context, with the host's CA bundle in the extra-CA hook."""
    context = workdir / "context"
    skip = shutil.ignore_patterns(".venv", ".git", "tmp", "warehouse", "__pycache__", "results")
    shutil.copytree(ROOT, context, ignore=skip)
    if HOST_CA.exists():  # HTTPS here goes through a proxy whose CA only the host trusts
        shutil.copy(HOST_CA, context / "docker" / "certs" / "host-ca.crt")
    # Spark's S3 connector, as `runner fetch-jars --into docker/jars` puts it before a build
    for jar in connector_jars():
        try:
            os.link(jar, context / "docker" / "jars" / Path(jar).name)
        except OSError:  # another file system: copy
            shutil.copy(jar, context / "docker" / "jars")
    return context


@pytest.fixture(scope="module")
def image(docker, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("image")
    tarball = _base_tarball(workdir)
    # imported once per tarball: each import is a new image, and every layer built on the
    # one before would be built again
    made = f"{tarball.name}:{tarball.stat().st_size}:{tarball.stat().st_mtime_ns}"
    label = '{{index .Config.Labels "runner.base"}}'
    known = docker("image", "inspect", "--format", label, BASE_TAG)
    if known.returncode != 0 or known.stdout.strip() != made:
        change = f"LABEL runner.base={made}"
        imported = docker("import", "--change", change, str(tarball), BASE_TAG)
        assert imported.returncode == 0, imported.stderr
    build = ["build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_TAG}"]
    done = docker(*build, "-t", IMAGE, str(_context(workdir)), timeout=1200)
    assert done.returncode == 0, f"docker build failed:\n{done.stdout[-4000:]}\n{done.stderr}"
    return IMAGE


def _records(seed: int, n: int, keys: int) -> list[dict]:
    rng = random.Random(seed)
    cities = ["paris", "lima", "oslo"]
    return [
        {
            "id": rng.randrange(keys),
            "city": rng.choice(cities),
            "ts": rng.randrange(1_000),
            "amount": round(rng.uniform(1, 100), 2),
        }
        for _ in range(n)
    ]


def _write_input(directory: Path, records: list[dict]) -> None:
    directory.mkdir(parents=True)
    (directory / "part-0.json").write_text("".join(json.dumps(r) + "\n" for r in records))


def _spec(name: str, source: str) -> dict:
    return {
        "name": name,
        "spark": {"master": "local[2]", "conf": {"spark.ui.enabled": "false"}},
        "sources": [
            {
                "name": "src",
                "format": "json",
                "path": source,
                "schema": "id long, city string, ts long, amount double",
            }
        ],
        "target": {
            "path": "warehouse/events",
            "operation": "upsert",
            "record_key": ["id"],
            "precombine_field": "ts",
            "key_generator": {"type": "SIMPLE", "partition_fields": ["city"]},
            "index": {"buckets": 4},
        },
        # Read only by `runner render`; a local run (this one) must ignore it.
        "kubernetes": {
            "executor": {"instances": 3, "memory": "4g"},
            "volume": {"claim": "events-data", "mount_path": "/work"},
        },
    }


def _expected(batches: list[list[dict]]) -> pd.DataFrame:
    """Upsert semantics in pandas: per (partition, key) the greatest ts wins, later on ties."""
    rows = pd.DataFrame([r for batch in batches for r in batch])
    rows["order"] = range(len(rows))
    rows = rows.sort_values(["ts", "order"]).groupby(["city", "id"]).tail(1)
    return rows.drop(columns="order").sort_values(["city", "id"]).reset_index(drop=True)


def _table(path: Path) -> pd.DataFrame:
    data = DeltaTable(str(path)).to_pandas(columns=["id", "city", "ts", "amount"])
    return data.sort_values(["city", "id"]).reset_index(drop=True)


@pytest.fixture
def work(tmp_path):
    """The directory mounted at /work."""
    work = tmp_path / "work"
    work.mkdir()
    return work


def _open(work: Path) -> None:
    """Make the mounted files writable by the image's user (uid 10001)."""
    for path in [work, *work.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)


def test_docker_run_runs_a_spec_and_the_cluster_entry_runs_the_next(docker, image, work):
    first, second = _records(1, 300, 120), _records(2, 80, 200)
    _write_input(work / "in1", first)
    _write_input(work / "in2", second)
    (work / "pipeline.yaml").write_text(yaml.safe_dump(_spec("events", "in1")))
    (work / "changes.yaml").write_text(yaml.safe_dump(_spec("events-changes", "in2")))
    _open(work)

    mount = ["--rm", "--network", "host", "-v", f"{work}:/work"]
    done = docker("run", *mount, image, "/work/pipeline.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "events: upsert committed version 1 of /work/warehouse/events" in done.stdout
    pd.testing.assert_frame_equal(_table(work / "warehouse" / "events"), _expected([first]))

    # What a SparkApplication's driver pod runs: spark-submit (client mode in the pod) with
    # the image's main file and the mounted spec; master and conf come from spark-submit.
    submit = ["driver", "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
    submit += ["--name", "events-changes", "local:///opt/runner/driver.py", "/work/changes.yaml"]
    done = docker("run", *mount, image, *submit)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "events-changes: upsert committed version 2" in done.stdout
    table = DeltaTable(str(work / "warehouse" / "events"))
    assert table.version() == 2
    pd.testing.assert_frame_equal(_table(work / "warehouse" / "events"), _expected([first, second]))


def test_the_image_reads_a_source_on_s3_under_spark_submit(docker, image, work):
    """The connector baked into the image is on Spark's classpath: the driver pod's command
    reads a json source from S3 (moto on the host) with the settings of its environment."""
    if not connector_jars():
        pytest.skip("Spark's S3 connector could not be fetched, so the image has none")
    boto3 = pytest.importorskip("boto3")
    records = _records(3, 50, 40)
    spec = _spec("events-s3", "s3://landing/events")
    with moto_server() as endpoint:
        env = s3_environment(endpoint)
        client = boto3.client("s3", **_boto_args(env))
        client.create_bucket(Bucket="landing")
        body = "".join(json.dumps(r) + "\n" for r in records).encode()
        client.put_object(Bucket="landing", Key="events/part-0.json", Body=body)
        (work / "pipeline.yaml").write_text(yaml.safe_dump(spec))
        _open(work)
        mount = ["--rm", "--network", "host", "-v", f"{work}:/work"]
        mount += [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
        checked = docker("run", *mount, image, "fetch-jars", "--check")
        assert "on Spark's classpath" in checked.stdout, checked.stdout + checked.stderr
        submit = ["driver", "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
        submit += ["--name", "events-s3", "local:///opt/runner/driver.py", "/work/pipeline.yaml"]
        done = docker("run", *mount, image, *submit)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "events-s3: upsert committed version 1" in done.stdout
    pd.testing.assert_frame_equal(_table(work / "warehouse" / "events"), _expected([records]))


def _boto_args(env: dict[str, str]) -> dict[str, str]:
    return {
        "endpoint_url": env["AWS_ENDPOINT_URL"],
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_REGION"],
    }


def test_image_renders_and_checks_manifests_and_runs_as_non_root(docker, image, work):
    (work / "pipeline.yaml").write_text(yaml.safe_dump(_spec("events", "in")))
    _open(work)
    mount = ["--rm", "--network", "none", "-v", f"{work}:/work"]
    render = ["render", "/work/pipeline.yaml", "--image", image, "--out", "/work/k8s"]
    done = docker("run", *mount, image, *render)
    assert done.returncode == 0, done.stderr
    done = docker("run", *mount, image, "render", "--check", "/work/k8s/events.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok (ConfigMap/events-spec, SparkApplication/events)" in done.stdout
    app = list(yaml.safe_load_all((work / "k8s" / "events.yaml").read_text()))[1]
    assert app["spec"]["executor"]["instances"] == 3

    probe = "id -u; test -r /opt/runner/driver.py && echo main; java -version 2>&1 | head -1"
    probe += "; ls $(python -c 'import pyspark,os;print(os.path.dirname(pyspark.__file__))')/jars"
    done = docker("run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", probe)
    lines = done.stdout.splitlines()
    assert lines[0] == "10001"
    assert lines[1] == "main"
    assert '"17.' in lines[2]
    assert "postgresql.jar" in lines
