"""A spec as Kubernetes objects: a ConfigMap with the spec file and a SparkApplication.

The output is deterministic (same spec and arguments, same bytes), so rendered manifests can
be committed and compared. Secrets stay references: every `${env:NAME}` of the spec becomes
an environment variable read from a Secret (key NAME), and the ConfigMap holds the spec as
written. Nothing here imports pyspark.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from runner.errors import UserError
from runner.k8s.values import cron_problem
from runner.sources.kinds import registered
from runner.spec import load_spec
from runner.spec.model import PipelineSpec, PodResources, SharedVolume
from runner.spec.secrets import env_names

API_VERSION = "sparkoperator.k8s.io/v1beta2"
# The image puts runner/driver.py here (see the Dockerfile); spark-submit runs it.
MAIN_FILE = "local:///opt/runner/driver.py"
# The spec file is mounted into the image's working directory, as with `docker run -v DIR:/work`.
WORK_DIR = "/work"
RUN_AS_USER = 10001  # the image's numeric non-root user
SPEC_HASH_ANNOTATION = "runner.dev/spec-sha256"
# Where `runner run --continuous` serves its metrics (runner/observe/metrics.py): the port
# is the spec's metrics.port; its server answers on any path, /metrics by convention.
METRICS_PORT_NAME = "metrics"
METRICS_PATH = "/metrics"
_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# Source formats whose path every pod reads (a jdbc source has none).
_PATH_FORMATS = tuple(kind.format for kind in registered() if kind.reads_path)


def k8s_name(name: str) -> str:
    """A pipeline name as a Kubernetes object name (DNS-1123 label): trips_v2 -> trips-v2."""
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:50].strip("-")
    if not out:
        raise UserError(f"pipeline name {name!r} gives no valid Kubernetes name")
    return out


def spark_version() -> str:
    """The pyspark version the image runs, from package metadata (no JVM, no import)."""
    return metadata.version("pyspark")


@dataclass(frozen=True)
class Rendered:
    """The manifests of one spec as YAML text, and the file name `--out DIR` writes."""

    text: str
    file_name: str

    def write_into(self, directory: Path) -> Path:
        target = directory / self.file_name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.text)
        return target


def render_spec_file(
    spec_file: str, image: str, namespace: str | None, schedule: str | None
) -> Rendered:
    """`runner render SPEC`: the spec's manifests, headed by the command that renders them
    again."""
    spec = load_spec(spec_file, resolve_paths=False)  # the pods resolve ${env:NAME} in paths
    command = ["runner", "render", spec_file, "--image", image]
    command += ["--namespace", namespace] if namespace else []
    command += ["--schedule", schedule] if schedule else []
    docs = render_manifests(
        spec, Path(spec_file).read_text(encoding="utf-8"), image, namespace, schedule
    )
    return Rendered(to_yaml(docs, shlex.join(command)), f"{k8s_name(spec.name)}.yaml")


@dataclass(frozen=True)
class Bundle:
    """What one SparkApplication runs: one spec, or a set of specs (`runner run A B ...`
    in the set's order), each file with its text; the first spec's kubernetes: block and
    metrics port are the application's (a set's specs must agree on them)."""

    name: str
    specs: tuple[tuple[PipelineSpec, str], ...]  # (spec, its file's text)

    @property
    def lead(self) -> PipelineSpec:
        return self.specs[0][0]

    @property
    def files(self) -> dict[str, str]:
        return {Path(spec.file).name: text for spec, text in self.specs}

    def digest(self) -> str:
        if len(self.specs) == 1:
            return hashlib.sha256(self.specs[0][1].encode()).hexdigest()
        joined = "\0".join(f"{name}\0{text}" for name, text in self.files.items())
        return hashlib.sha256(joined.encode()).hexdigest()


def render_set(
    specs: list[PipelineSpec],
    name: str,
    image: str,
    namespace: str | None,
    schedule: str | None,
    command: list[str],
) -> Rendered:
    """`runner render DIR` (or several specs): one application for the set, which the
    pods run as `runner run` runs it (the files in the set's order), `command` heading the
    text. The files are mounted side by side at /work, so they must be in one directory:
    their relative paths then mean in the pods what they mean here."""
    folders = sorted({str(Path(spec.file).parent) for spec in specs})
    if len(folders) > 1:
        raise UserError(
            f"the specs of the set are in {len(folders)} directories ({', '.join(folders)}); "
            "the pods mount them side by side, where their relative paths would change: "
            "render specs of one directory"
        )
    texts = tuple((spec, Path(spec.file).read_text(encoding="utf-8")) for spec in specs)
    docs = bundle_manifests(Bundle(name, texts), image, namespace, schedule)
    return Rendered(to_yaml(docs, shlex.join(command)), f"{k8s_name(name)}.yaml")


def render_manifests(
    spec: PipelineSpec,
    spec_text: str,
    image: str,
    namespace: str | None = None,
    schedule: str | None = None,
) -> list[dict[str, Any]]:
    """The ConfigMap and the SparkApplication (ScheduledSparkApplication with a schedule)."""
    return bundle_manifests(Bundle(spec.name, ((spec, spec_text),)), image, namespace, schedule)


def bundle_manifests(
    bundle: Bundle, image: str, namespace: str | None = None, schedule: str | None = None
) -> list[dict[str, Any]]:
    """The manifests of one spec or of a set: the ConfigMap of their files and the
    SparkApplication (ScheduledSparkApplication with a schedule) that runs them."""
    if schedule is not None and (problem := cron_problem(schedule)):
        raise UserError(f"--schedule: {problem}")
    files = bundle.files
    if len(files) < len(bundle.specs):
        raise UserError("two specs of the set have one file name: a ConfigMap key each")
    for file_name in files:
        if not _KEY.match(file_name):
            raise UserError(f"spec file name {file_name!r} is not a valid ConfigMap key")
    k8s = bundle.lead.kubernetes
    for spec, text in bundle.specs:
        if spec.kubernetes != k8s:
            raise UserError(
                f"{spec.file}: its kubernetes: block differs from {bundle.lead.file}'s; the "
                "specs of a set run in one SparkApplication: give them the same block"
            )
        check_shared_paths(yaml.safe_load(text), k8s.volume)
    name = k8s_name(bundle.name)
    meta = {
        "name": name,
        "namespace": namespace or k8s.namespace,
        "labels": {"app.kubernetes.io/name": "runner", "app.kubernetes.io/instance": name},
        "annotations": {SPEC_HASH_ANNOTATION: bundle.digest()},
    }
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**meta, "name": f"{name}-spec"},
        "data": files,
    }
    app_spec = _application(bundle, image, meta)
    if schedule is None:
        app = {"apiVersion": API_VERSION, "kind": "SparkApplication", "metadata": meta}
        return [config_map, {**app, "spec": app_spec}]
    scheduled = {
        "schedule": schedule,
        "concurrencyPolicy": "Forbid",
        "successfulRunHistoryLimit": 1,
        "failedRunHistoryLimit": 3,
        "template": app_spec,
    }
    app = {"apiVersion": API_VERSION, "kind": "ScheduledSparkApplication", "metadata": meta}
    return [config_map, {**app, "spec": scheduled}]


def _application(bundle: Bundle, image: str, meta: dict[str, Any]) -> dict[str, Any]:
    """The SparkApplication's .spec: the image running the mounted spec files, its pods."""
    spec = bundle.lead
    k8s = spec.kubernetes
    app_spec: dict[str, Any] = {
        "type": "Python",
        "mode": "cluster",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "sparkVersion": spark_version(),
        "mainApplicationFile": MAIN_FILE,
        "arguments": [f"{WORK_DIR}/{file_name}" for file_name in bundle.files],
    }
    if k8s.spark_conf:
        app_spec["sparkConf"] = dict(sorted(k8s.spark_conf.items()))
    app_spec["restartPolicy"] = _restart_policy(spec)
    volumes, mounts = _volumes(k8s.volume, meta["name"], list(bundle.files))
    app_spec["volumes"] = volumes
    names = dict.fromkeys(n for _, text in bundle.specs for n in env_names(yaml.safe_load(text)))
    env = [
        {"name": var, "valueFrom": {"secretKeyRef": {"name": k8s.secret, "key": var}}}
        for var in names
    ]
    # The hash on the pods is part of .spec: a changed spec is a changed application, which
    # the operator submits again.
    pod = _PodShared(meta["labels"], meta["annotations"], env, mounts)
    app_spec["driver"] = {**_pod(k8s.driver, pod), "serviceAccount": k8s.service_account}
    if spec.metrics.port is not None:
        app_spec["driver"] = _scraped(app_spec["driver"], spec.metrics.port)
    app_spec["executor"] = {**_pod(k8s.executor, pod), "instances": k8s.executor.instances}
    return app_spec


def _scraped(driver: dict[str, Any], port: int) -> dict[str, Any]:
    """The driver pod with its metrics port and the annotations Prometheus' usual pod
    discovery (prometheus.io/scrape, port, path) scrapes by."""
    annotations = {
        **driver["annotations"],
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": METRICS_PATH,
    }
    ports = [{"name": METRICS_PORT_NAME, "containerPort": port, "protocol": "TCP"}]
    return {**driver, "annotations": annotations, "ports": ports}


def _volumes(
    volume: SharedVolume | None, name: str, file_names: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pods' volumes and their mounts: the specs' ConfigMap (each file at /work, where
    its relative paths are resolved as a single spec's) and the shared volume."""
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = [{"name": "spec", "configMap": {"name": f"{name}-spec"}}]
    if volume:  # first: the spec file may be mounted inside it (at /work)
        mounts.append({"name": "data", "mountPath": volume.mount_path})
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": volume.claim}})
    for file_name in file_names:
        mounts.append(
            {
                "name": "spec",
                "mountPath": f"{WORK_DIR}/{file_name}",
                "subPath": file_name,
                "readOnly": True,
            }
        )
    return volumes, mounts


def check_shared_paths(raw: dict[str, Any], volume: SharedVolume | None) -> None:
    """Refuse a spec whose table, quarantine or file sources are paths no two pods share.

    In the cluster the driver commits files that the executors wrote: a path on a pod's own
    disk would give every executor its own table directory and the commit would name files
    nobody else can read. Paths are checked as written (`raw`), as the pod resolves them:
    relative ones under /work, where the spec is mounted."""
    target = raw.get("target", {})
    named = [("target.path", target.get("path"))]
    named.append(("target.quarantine.path", (target.get("quarantine") or {}).get("path")))
    for i, source in enumerate(raw.get("sources", [])):
        if source.get("format") in _PATH_FORMATS:
            named.append((f"sources[{i}].path", source.get("path")))
    problems = []
    for field, path in named:
        if not isinstance(path, str) or "://" in path or path.startswith("${env:"):
            continue  # an object store, or a location the pod's environment decides
        in_pod = posixpath.normpath(posixpath.join(WORK_DIR, path))
        if volume and (in_pod + "/").startswith(volume.mount_path.rstrip("/") + "/"):
            continue
        problems.append(f"{field} {path!r} (in the pods: {in_pod})")
    if not problems:
        return
    where = (
        f"outside kubernetes.volume ({volume.mount_path})" if volume else "on each pod's own disk"
    )
    raise UserError(
        f"{'; '.join(problems)}: {where}, so each executor would write its files where the "
        "driver and the other executors cannot read them. Use an object store URI "
        "(s3://bucket/...), or share a volume between the pods: kubernetes.volume: "
        "{claim: NAME, mount_path: /data} (a ReadWriteMany PersistentVolumeClaim) with these "
        "paths under it"
    )


def _restart_policy(spec: PipelineSpec) -> dict[str, Any]:
    k8s = spec.kubernetes
    policy: dict[str, Any] = {"type": k8s.restart_policy}
    if k8s.restart_policy == "OnFailure":
        policy["onFailureRetries"] = k8s.retries
        policy["onFailureRetryInterval"] = k8s.retry_interval_seconds
        policy["onSubmissionFailureRetries"] = k8s.retries
        policy["onSubmissionFailureRetryInterval"] = k8s.retry_interval_seconds
    return policy


@dataclass(frozen=True)
class _PodShared:
    """What the driver and the executors share: labels, annotations, env and mounts."""

    labels: dict[str, str]
    annotations: dict[str, str]
    env: list[dict[str, Any]]
    mounts: list[dict[str, Any]]


def _pod(resources: PodResources, shared: _PodShared) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "cores": resources.cores,
        "memory": resources.memory,
        "labels": shared.labels,
        "annotations": shared.annotations,
    }
    if shared.env:
        pod["env"] = shared.env
    pod["volumeMounts"] = shared.mounts
    pod["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "allowPrivilegeEscalation": False,
    }
    return pod


class _Dumper(yaml.SafeDumper):
    """Block style, no anchors, multi-line strings (the spec text) as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(documents: list[dict[str, Any]], command: str | None = None) -> str:
    """The documents as one multi-document YAML text, with a header naming the command."""
    header = ""
    if command:
        header = f"# Generated by `{command}`: change the spec and render again.\n"
    body = yaml.dump_all(
        documents,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        explicit_start=True,
        width=100,
    )
    return header + body
