"""What the image runs as a Spark pod on Kubernetes: `runner driver ...` or `runner executor`.

Spark starts its driver and executor pods with the image's entrypoint and the argument
`driver` or `executor`, as Spark's own images do (their entrypoint.sh). The image's
entrypoint is `runner`, so these two commands do what that script does, with the Spark that
pyspark ships: the driver runs spark-submit in client mode inside its pod; an executor starts
Spark's Kubernetes executor backend with the settings Spark put in its environment.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path

from runner.errors import EnvironmentProblem

EXECUTOR_BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
_EXECUTOR_ENV = {
    "--driver-url": "SPARK_DRIVER_URL",
    "--executor-id": "SPARK_EXECUTOR_ID",
    "--cores": "SPARK_EXECUTOR_CORES",
    "--app-id": "SPARK_APPLICATION_ID",
    "--hostname": "SPARK_EXECUTOR_POD_IP",
    "--resourceProfileId": "SPARK_RESOURCE_PROFILE_ID",
    "--podName": "SPARK_EXECUTOR_POD_NAME",
}


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package (found without importing it)."""
    found = importlib.util.find_spec("pyspark")
    if found is None or not found.submodule_search_locations:
        raise EnvironmentProblem("pyspark is not installed")
    return Path(next(iter(found.submodule_search_locations)))


def driver_command(args: list[str], env: Mapping[str, str]) -> list[str]:
    """spark-submit in client mode, bound to the pod's address when Spark gave one."""
    command = [str(spark_home() / "bin" / "spark-submit")]
    bind = env.get("SPARK_DRIVER_BIND_ADDRESS")
    if bind:
        command += ["--conf", f"spark.driver.bindAddress={bind}"]
        command += ["--conf", f"spark.executorEnv.SPARK_DRIVER_POD_IP={bind}"]
    return [*command, "--deploy-mode", "client", *args]


def executor_command(env: Mapping[str, str]) -> list[str]:
    """Spark's Kubernetes executor backend, configured from the pod's environment."""
    missing = [
        name for name in (*_EXECUTOR_ENV.values(), "SPARK_EXECUTOR_MEMORY") if not env.get(name)
    ]
    if missing:
        raise EnvironmentProblem(
            f"not started by Spark as an executor pod: {', '.join(missing)} not set"
        )
    java_home = env.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else "java"
    numbered = [k for k in env if re.fullmatch(r"SPARK_JAVA_OPT_\d+", k)]
    java_opts = [env[k] for k in sorted(numbered, key=lambda k: int(k.rsplit("_", 1)[1]))]
    classpath = [env[k] for k in ("SPARK_CONF_DIR", "SPARK_CLASSPATH") if env.get(k)]
    classpath.append(str(spark_home() / "jars" / "*"))
    if env.get("SPARK_EXTRA_CLASSPATH"):
        classpath.append(env["SPARK_EXTRA_CLASSPATH"])
    memory = env["SPARK_EXECUTOR_MEMORY"]
    command = [java, *java_opts, f"-Xms{memory}", f"-Xmx{memory}"]
    command += ["-cp", os.pathsep.join(classpath), EXECUTOR_BACKEND]
    for flag, name in _EXECUTOR_ENV.items():
        command += [flag, env[name]]
    return command
