"""`runner render`: Kubernetes manifests for a spec, and their offline check against the CRDs."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runner.cli import cli
from runner.errors import UserError
from tests.cli_in_process import run_cli

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"

SECRET_SPEC = """\
name: Orders_v2
sources:
  - name: orders
    format: csv
    path: "s3://${env:BUCKET}/orders"
    options: {header: true, password: "${env:PG_PASSWORD}"}
target:
  path: "s3://${env:BUCKET}/warehouse/orders"
  operation: insert
  record_key: [order_id]
  key_generator: {type: NON_PARTITIONED}
  index: {buckets: 4}
kubernetes:
  namespace: ingest
  service_account: orders-driver
  secret: orders-credentials
  driver: {cores: 2, memory: 3g}
  executor: {cores: 3, memory: 4g, instances: 5}
  restart_policy: Never
  spark_conf: {spark.sql.shuffle.partitions: 64}
"""


def render(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["render", *args])
    return result.exit_code, result.output


def documents(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


@pytest.fixture
def secret_spec(tmp_path):
    path = tmp_path / "orders.yaml"
    path.write_text(SECRET_SPEC)
    return path


def test_quickstart_renders_a_config_map_and_a_spark_application():
    code, out = render(str(QUICKSTART), "--image", "registry.example/runner:1.2")
    assert code == 0, out
    config_map, app = documents(out)
    assert (config_map["kind"], app["kind"]) == ("ConfigMap", "SparkApplication")
    # The ConfigMap holds the spec file byte for byte; the pods mount it where the
    # application's argument points, next to the image's working directory.
    assert config_map["data"] == {"quickstart.yaml": QUICKSTART.read_text()}
    spec = app["spec"]
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert (spec["type"], spec["mode"], spec["image"]) == (
        "Python",
        "cluster",
        "registry.example/runner:1.2",
    )
    assert spec["sparkVersion"] == metadata.version("pyspark")
    assert spec["mainApplicationFile"] == "local:///opt/runner/driver.py"
    assert spec["volumes"] == [
        {"name": "spec", "configMap": {"name": "trips-spec"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "runner-data"}},
    ]
    for role in ("driver", "executor"):
        data, mount = spec[role]["volumeMounts"]
        # the table and input on the volume every pod shares (quickstart.yaml's kubernetes:)
        assert data == {"name": "data", "mountPath": "/work"}
        assert mount["name"] == "spec"
        assert mount["mountPath"] == spec["arguments"][0] == "/work/quickstart.yaml"
        assert mount["subPath"] in config_map["data"]
        assert spec[role]["securityContext"]["runAsNonRoot"] is True
    # Defaults of the kubernetes block, which quickstart.yaml sets only the volume of.
    assert app["metadata"]["namespace"] == config_map["metadata"]["namespace"] == "runner"
    assert spec["driver"]["serviceAccount"] == "runner"
    assert (spec["driver"]["cores"], spec["driver"]["memory"]) == (1, "1g")
    assert (spec["executor"]["instances"], spec["executor"]["memory"]) == (2, "2g")
    assert spec["restartPolicy"]["type"] == "OnFailure"


def test_the_kubernetes_block_sets_resources_and_settings(secret_spec):
    code, out = render(str(secret_spec), "--image", "runner:1")
    assert code == 0, out
    config_map, app = documents(out)
    spec = app["spec"]
    assert app["metadata"]["name"] == "orders-v2"  # a valid Kubernetes name
    assert config_map["metadata"]["name"] == "orders-v2-spec"
    assert app["metadata"]["namespace"] == "ingest"
    assert spec["driver"]["serviceAccount"] == "orders-driver"
    assert (spec["driver"]["cores"], spec["driver"]["memory"]) == (2, "3g")
    executor = spec["executor"]
    assert (executor["cores"], executor["memory"], executor["instances"]) == (3, "4g", 5)
    assert spec["restartPolicy"] == {"type": "Never"}
    assert spec["sparkConf"] == {"spark.sql.shuffle.partitions": "64"}
    code, out = render(str(secret_spec), "--image", "runner:1", "--namespace", "staging")
    assert {d["metadata"]["namespace"] for d in documents(out)} == {"staging"}


def test_env_references_become_secret_refs_and_never_values(secret_spec, monkeypatch):
    monkeypatch.setenv("PG_PASSWORD", "hunter2-secret")
    monkeypatch.setenv("BUCKET", "prod-bucket-name")
    code, out = render(str(secret_spec), "--image", "runner:1")
    assert code == 0, out
    assert "hunter2-secret" not in out and "prod-bucket-name" not in out
    config_map, app = documents(out)
    assert "${env:PG_PASSWORD}" in config_map["data"]["orders.yaml"]
    expected = [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": "orders-credentials", "key": name}}}
        for name in ("BUCKET", "PG_PASSWORD")
    ]
    assert app["spec"]["driver"]["env"] == expected
    assert app["spec"]["executor"]["env"] == expected


def test_same_input_same_bytes_and_a_changed_spec_changes_the_application(secret_spec):
    first = render(str(secret_spec), "--image", "runner:1")[1]
    assert render(str(secret_spec), "--image", "runner:1")[1] == first
    secret_spec.write_text(SECRET_SPEC.replace("buckets: 4", "buckets: 8"))
    changed = render(str(secret_spec), "--image", "runner:1")[1]
    before, after = documents(first)[1], documents(changed)[1]
    # The operator submits again when .spec changes: the spec's hash is on the pods.
    key = "runner.dev/spec-sha256"
    assert (
        before["spec"]["driver"]["annotations"][key] != after["spec"]["driver"]["annotations"][key]
    )
    assert {k: v for k, v in before["spec"].items() if k not in ("driver", "executor")} == {
        k: v for k, v in after["spec"].items() if k not in ("driver", "executor")
    }


def test_schedule_renders_a_scheduled_spark_application(tmp_path):
    code, out = render(str(QUICKSTART), "--image", "runner:1", "--schedule", "0 3 * * *")
    assert code == 0, out
    _, scheduled = documents(out)
    assert scheduled["kind"] == "ScheduledSparkApplication"
    assert scheduled["spec"]["schedule"] == "0 3 * * *"
    assert scheduled["spec"]["template"]["mainApplicationFile"] == "local:///opt/runner/driver.py"
    rendered = tmp_path / "scheduled.yaml"
    rendered.write_text(out)
    code, out = render("--check", str(rendered))
    assert code == 0, out
    assert "ScheduledSparkApplication/trips" in out


def test_a_schedule_is_read_as_the_spark_operator_reads_it(tmp_path):
    """robfig/cron's standard parser, which the operator calls: five fields or a descriptor."""
    done = run_cli("render", str(QUICKSTART), "--image", "runner:1", "--schedule", "every 5 min")
    assert (done.returncode, done.stdout) == (2, "")
    assert "--schedule: 'every 5 min' is not a cron schedule the spark-operator reads" in (
        done.stderr
    )
    assert "'*/5 * * * *'" in done.stderr  # the fix
    for schedule in ("@hourly", "@every 5m", "CRON_TZ=UTC 0 3 * * MON-FRI", "*/15 0-6 1,15 * ?"):
        code, out = render(str(QUICKSTART), "--image", "runner:1", "--schedule", schedule)
        assert code == 0, out
        rendered = tmp_path / "scheduled.yaml"
        rendered.write_text(out)
        assert render("--check", str(rendered))[0] == 0


def test_check_reads_the_schedule_memory_and_limits_as_the_operator_and_spark_do(tmp_path):
    docs = documents(render(str(QUICKSTART), "--image", "runner:1", "--schedule", "@daily")[1])
    docs[1]["spec"]["schedule"] = "every 5 min"
    template = docs[1]["spec"]["template"]
    template["driver"].update(memory="2 GB", coreLimit="1500m")
    template["executor"].update(memoryOverhead="512m", coreLimit="2 cores", memoryLimit="4GB")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code, out = render("--check", str(path))
    assert code == 2
    shown = f"{path}: document 2 (ScheduledSparkApplication/trips): spec."
    assert f"{shown}schedule: 'every 5 min' is not a cron schedule" in out
    assert f"{shown}template.driver.memory: '2 GB' is not a size Spark reads" in out
    assert f"{shown}template.executor.coreLimit: '2 cores' is not a Kubernetes quantity" in out
    assert f"{shown}template.executor.memoryLimit: '4GB' is not a Kubernetes quantity" in out
    assert "coreLimit: '1500m'" not in out and "memoryOverhead" not in out
    assert len([line for line in out.splitlines() if line.startswith(shown)]) == 4


def test_memory_from_the_spec_is_refused_at_its_line_and_column(tmp_path):
    spec = tmp_path / "orders.yaml"
    spec.write_text(SECRET_SPEC.replace("memory: 3g", "memory: 2 GB"))
    done = run_cli("render", str(spec), "--image", "runner:1")
    assert done.returncode == 2
    assert f'{spec}:17:30: kubernetes.driver.memory: "2 GB" is not valid here; write a whole' in (
        done.stderr
    )


def test_out_writes_a_file_named_after_the_pipeline(tmp_path):
    code, out = render(str(QUICKSTART), "--image", "runner:1", "--out", str(tmp_path / "k"))
    assert code == 0, out
    written = tmp_path / "k" / "trips.yaml"
    assert written.read_text() == render(str(QUICKSTART), "--image", "runner:1")[1]


def test_usage_errors():
    assert render(str(QUICKSTART))[0] == 2  # no --image
    assert render("--check", str(QUICKSTART), "--image", "x")[0] == 2


def test_a_typo_in_the_kubernetes_block_is_refused_by_validate(tmp_path):
    spec = tmp_path / "typo.yaml"
    spec.write_text(SECRET_SPEC.replace("memory: 3g", "memroy: 3g"))
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    assert result.exit_code == 2
    assert "kubernetes.driver.memroy: unknown key (did you mean 'memory'?)" in result.output
    spec.write_text(SECRET_SPEC.replace("memory: 4g", "memory: 4GB"))
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    assert result.exit_code == 2
    assert "kubernetes.executor.memory" in result.output


def test_render_starts_no_jvm_and_imports_no_pyspark():
    code = (
        "import sys; from click.testing import CliRunner; from runner.cli import cli; "
        f"r = CliRunner().invoke(cli, ['render', {str(QUICKSTART)!r}, '--image', 'x']); "
        "assert r.exit_code == 0, r.output; "
        "assert not [m for m in sys.modules if m.startswith(('pyspark', 'py4j'))]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _rendered(tmp_path: Path) -> Path:
    out = tmp_path / "app.yaml"
    out.write_text(render(str(QUICKSTART), "--image", "runner:1")[1])
    return out


def _break(path: Path, edit) -> Path:
    docs = documents(path.read_text())
    edit(docs[1]["spec"])
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def test_check_passes_rendered_manifests(tmp_path):
    code, out = render("--check", str(_rendered(tmp_path)))
    assert code == 0, out
    assert "ok (ConfigMap/trips-spec, SparkApplication/trips)" in out


def test_check_refuses_an_unknown_field_and_names_it(tmp_path):
    path = _break(_rendered(tmp_path), lambda s: s["driver"].update(memroy="2g"))
    code, out = render("--check", str(path))
    assert code == 2
    assert f"{path}: document 2 (SparkApplication/trips): spec.driver.memroy: unknown field" in out


def test_check_refuses_a_wrong_type_and_names_the_field(tmp_path):
    path = _break(_rendered(tmp_path), lambda s: s["executor"].update(instances="two"))
    code, out = render("--check", str(path))
    assert code == 2
    assert "spec.executor.instances: expected integer, got string 'two'" in out


def test_check_refuses_unknown_fields_deep_in_pod_settings(tmp_path):
    def edit(spec):
        spec["volumes"][0]["configMap"]["nmae"] = "x"
        spec["restartPolicy"]["type"] = "Sometimes"

    code, out = render("--check", str(_break(_rendered(tmp_path), edit)))
    assert code == 2
    assert "spec.volumes[0].configMap.nmae: unknown field" in out
    assert "spec.restartPolicy.type: 'Sometimes' is not one of" in out


def test_check_refuses_a_misspelled_kind_and_a_config_map_typo(tmp_path):
    path = tmp_path / "m.yaml"
    docs = documents(render(str(QUICKSTART), "--image", "runner:1")[1])
    docs[0]["daat"] = docs[0].pop("data")
    docs[1]["kind"] = "SparkApplicaton"
    path.write_text(yaml.safe_dump_all(docs))
    code, out = render("--check", str(path))
    assert code == 2
    assert "document 1 (ConfigMap/trips-spec): daat: unknown field" in out
    assert "document 2 (SparkApplicaton/trips): kind: unknown kind 'SparkApplicaton'" in out


def test_check_reports_other_kinds_as_not_checked(tmp_path):
    path = tmp_path / "ns.yaml"
    path.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: runner}\n")
    code, out = render("--check", str(path))
    assert code == 0
    assert "not checked (no schema here): Namespace/runner" in out


LOCAL_SPEC = """\
name: events
sources:
  - {name: raw, format: json, path: in/events}
  - {name: users, format: jdbc, jdbc: {url: "jdbc:postgresql://db/app", table: users}}
transform: {sql: "SELECT * FROM raw JOIN users USING (user_id)"}
target:
  path: /data/tables/events
  operation: insert
  record_key: [id]
  key_generator: {type: NON_PARTITIONED}
  index: {buckets: 4}
  quarantine: {path: "s3://lake/quarantine/events"}
"""


def refusal(*args: str) -> str:
    """The message of the UserError a render stops with (the CLI prints it, exit 2)."""
    result = CliRunner().invoke(cli, ["render", *args])
    assert isinstance(result.exception, UserError), result.output
    return str(result.exception)


def test_paths_no_two_pods_share_are_refused_with_the_fix(tmp_path):
    spec = tmp_path / "events.yaml"
    spec.write_text(LOCAL_SPEC)

    out = refusal(str(spec), "--image", "runner:1")

    assert "target.path '/data/tables/events' (in the pods: /data/tables/events)" in out
    assert "sources[0].path 'in/events' (in the pods: /work/in/events)" in out
    assert "quarantine" not in out.split("on each pod's own disk")[0]  # s3 is shared
    assert "kubernetes.volume: {claim: NAME, mount_path: /data}" in out


def test_a_shared_volume_holds_them_in_every_pod_and_passes_the_crd_check(tmp_path):
    spec = tmp_path / "events.yaml"
    spec.write_text(LOCAL_SPEC + "kubernetes: {volume: {claim: lake, mount_path: /data}}\n")
    out = refusal(str(spec), "--image", "runner:1")
    assert "sources[0].path 'in/events'" in out and "outside kubernetes.volume" in out

    spec.write_text(
        LOCAL_SPEC.replace("path: in/events", "path: /data/in/events")
        + "kubernetes: {volume: {claim: lake, mount_path: /data}}\n"
    )
    code, out = render(str(spec), "--image", "runner:1", "--out", str(tmp_path / "out"))
    assert code == 0, out
    manifest = tmp_path / "out" / "events.yaml"
    app = documents(manifest.read_text())[1]["spec"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "lake"}} in app["volumes"]
    for role in ("driver", "executor"):
        assert {"name": "data", "mountPath": "/data"} in app[role]["volumeMounts"]
    assert render("--check", str(manifest)) == (
        0,
        f"{manifest}: ok (ConfigMap/events-spec, SparkApplication/events)\n",
    )


@pytest.mark.parametrize(
    "text", ["", "\n  \n", "# rendered later\n# nothing yet\n", "---\n...\n---\n"]
)
def test_check_of_a_file_with_nothing_to_check_fails(tmp_path, text):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["render", "--check", str(path)])
    assert (result.exit_code, result.stdout.splitlines()) == (
        2,
        [
            f"{path}: nothing to check: the file holds no YAML document (it is empty or only "
            "comments)"
        ],
    )
    assert result.stderr == "1 of 1 file(s) invalid\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("just words\n", "not a Kubernetes object (a mapping with apiVersion and kind)"),
        ("- kind: ConfigMap\n", "not a Kubernetes object (a mapping with apiVersion and kind)"),
        (
            QUICKSTART.read_text(),
            "a pipeline spec, not a manifest: check it with `runner validate`, or render it "
            "first (`runner render SPEC --image IMAGE`)",
        ),
    ],
)
def test_check_of_a_document_that_is_not_a_manifest_fails(tmp_path, text, problem):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["render", "--check", str(path)])
    assert (result.exit_code, result.stdout) == (2, f"{path}: document 1 (?): {problem}\n")


def test_paths_keep_their_references_unset_where_the_spec_is_rendered(secret_spec, monkeypatch):
    """The table's path is `s3://${env:BUCKET}/...`: the pods resolve it, from the Secret."""
    monkeypatch.delenv("BUCKET", raising=False)
    code, out = render(str(secret_spec), "--image", "runner:1")
    assert code == 0, out
    config_map, app = documents(out)
    assert 'path: "s3://${env:BUCKET}/warehouse/orders"' in config_map["data"]["orders.yaml"]
    assert {e["name"] for e in app["spec"]["driver"]["env"]} == {"BUCKET", "PG_PASSWORD"}


def test_a_metrics_port_gives_the_driver_the_port_and_prometheus_scrape_annotations(
    secret_spec, tmp_path
):
    code, plain = render(str(secret_spec), "--image", "runner:1")
    assert code == 0, plain
    secret_spec.write_text(SECRET_SPEC + "metrics: {port: 9464}\n")
    code, out = render(str(secret_spec), "--image", "runner:1")
    assert code == 0, out
    driver, executor = (documents(out)[1]["spec"][role] for role in ("driver", "executor"))
    assert driver["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    scrape = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9464",
        "prometheus.io/path": "/metrics",
    }
    assert scrape.items() <= driver["annotations"].items()
    assert "runner.dev/spec-sha256" in driver["annotations"]
    # only the driver serves the metrics; without a port, no pod is scraped
    assert "ports" not in executor and not scrape.keys() & executor["annotations"].keys()
    before = documents(plain)[1]["spec"]["driver"]
    assert "ports" not in before and not scrape.keys() & before["annotations"].keys()
    manifest = tmp_path / "orders.yaml"
    manifest.write_text(out)
    assert render("--check", str(manifest)) == (
        0,
        f"{manifest}: ok (ConfigMap/orders-v2-spec, SparkApplication/orders-v2)\n",
    )


def test_a_directory_of_specs_is_one_application_running_the_set(tmp_path):
    text = QUICKSTART.read_text()
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "trips.yaml").write_text(text)
    other = text.replace("name: trips", "name: fares").replace("warehouse/trips", "warehouse/fares")
    (specs / "fares.yaml").write_text(other)
    done = run_cli("render", str(specs), "--image", "runner:1")
    assert done.returncode == 0, done.stderr
    config_map, app = documents(done.stdout)
    assert config_map["data"] == {"fares.yaml": other, "trips.yaml": text}
    assert app["kind"] == "SparkApplication" and app["metadata"]["name"] == "specs"
    assert app["spec"]["arguments"] == ["/work/fares.yaml", "/work/trips.yaml"]
    mounts = [m["mountPath"] for m in app["spec"]["driver"]["volumeMounts"]]
    assert "/work/fares.yaml" in mounts and "/work/trips.yaml" in mounts
    out = tmp_path / "set.yaml"
    out.write_text(done.stdout)
    assert run_cli("render", "--check", str(out)).returncode == 0
    (specs / "fares.yaml").write_text(other.replace("claim: runner-data", "claim: other"))
    refused = run_cli("render", str(specs), "--image", "runner:1")
    assert refused.returncode == 2
    assert "its kubernetes: block differs from" in refused.stderr
