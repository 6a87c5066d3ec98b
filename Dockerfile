# The runner image: `docker run -v "$PWD":/work IMAGE /work/pipeline.yaml` runs a spec, and the
# spark-operator runs the same image as a SparkApplication (see `runner render`).
#
# Build arguments:
#   BASE_IMAGE     a Debian bookworm image with Python 3.11 (default: the official slim one;
#                  any image with python3 and python3-venv works, e.g. one made with debootstrap)
#   RUNNER_EXTRAS  pip extras of the runner, e.g. "delta-spark" (the Python package only: its
#                  JVM jars go in docker/jars/, since fetching them needs Maven Central)
# Build context inputs (each optional, empty but for a README by default):
#   docker/certs/*.crt   extra CA certificates, trusted by apt, pip, Python and Java
#   docker/jars/*.jar    extra JVM jars, put on Spark's classpath: Spark's S3 connector with
#                        `runner fetch-jars --into docker/jars` (for sources on S3)
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ARG RUNNER_EXTRAS=""

SHELL ["/bin/sh", "-eu", "-c"]

COPY docker/certs/ /usr/local/share/ca-certificates/runner/

# Java 17 for Spark, the PostgreSQL JDBC driver (/usr/share/java/postgresql.jar).
# Versions are not pinned: the base image's Debian release fixes them, and Debian's
# security updates replace the old versions, so pins would break the build.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates openjdk-17-jre-headless libpostgresql-jdbc-java \
    && update-ca-certificates \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

ENV PATH=/opt/runner/venv/bin:$PATH \
    PYSPARK_PYTHON=/opt/runner/venv/bin/python \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# The runner's dependencies, pinned by docker/constraints.txt, in a venv (the same layout
# whatever Python the base image has), in a layer of their own: read from pyproject.toml's
# lists, so a rebuild after a change to the runner's code reuses them (pyspark alone is a
# ~400 MB download). PIP_CERT: pip trusts the extra CAs too.
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml docker/constraints.txt /tmp/runner-deps/
RUN python3 -m venv /opt/runner/venv \
    && python3 -c 'import os, tomllib; \
project = tomllib.load(open("/tmp/runner-deps/pyproject.toml", "rb"))["project"]; \
extras = [e.strip() for e in os.environ.get("RUNNER_EXTRAS", "").split(",") if e.strip()]; \
wanted = project["dependencies"] + [d for e in extras for d in project["optional-dependencies"][e]]; \
print("\n".join(wanted))' > /tmp/runner-deps/requirements.txt \
    && pip install --no-cache-dir --constraint /tmp/runner-deps/constraints.txt \
        --requirement /tmp/runner-deps/requirements.txt \
    && rm -rf /tmp/runner-deps

# The runner itself, over them (--no-deps: the layer above has them all).
COPY pyproject.toml README.md /tmp/runner-src/
COPY schemas/ /tmp/runner-src/schemas/
COPY k8s/crds/ /tmp/runner-src/k8s/crds/
COPY runner/ /tmp/runner-src/runner/
RUN pip install --no-cache-dir --no-deps "/tmp/runner-src" \
    && pip check \
    && rm -rf /tmp/runner-src

# Spark's classpath: the JDBC driver and any extra jars, linked into pyspark's jars/.
# The SparkApplication's main file sits at a fixed path, whatever the Python version.
COPY docker/jars/ /opt/runner/jars/
RUN spark_jars="$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/jars" \
    && ln -s /usr/share/java/postgresql.jar "$spark_jars/postgresql.jar" \
    && for jar in /opt/runner/jars/*.jar; do \
        if [ -e "$jar" ]; then ln -s "$jar" "$spark_jars/"; fi; \
    done \
    && cp "$(python -c 'import runner.driver as m; print(m.__file__)')" /opt/runner/driver.py \
    && runner --version

# A numeric non-root user (Kubernetes checks runAsNonRoot against the number).
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/runner \
        --shell /usr/sbin/nologin runner \
    && mkdir -p /work \
    && chown runner:runner /work
USER 10001:10001
WORKDIR /work

# Java's class-data archive of Spark's classes (runner/jvm/java_cds.py), written by one tiny
# local run as the image is built: every `docker run` of the image starts faster.
COPY docker/write_class_archive.py /opt/runner/write_class_archive.py
RUN python /opt/runner/write_class_archive.py

ENTRYPOINT ["runner"]
CMD ["--help"]
