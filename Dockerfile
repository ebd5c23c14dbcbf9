# ONE image for every IcebergSync container:
#   * the operator:  `icebergsync-operator`            (the Helm chart's Deployment args)
#   * the Spark job: local:///opt/icebergsync/spark_app/main.py
#                    (mainApplicationFile of every rendered SparkApplication); the Spark Operator's
#                    driver and executor pods call the image with `driver ...` / `executor ...`,
#                    which docker/entrypoint.sh (Spark's Kubernetes entrypoint) turns into
#                    spark-submit / the executor JVM.
#   * the CLI:       `icebergsync run|status ...`, `icebergsync --version`
#
# Everything comes from Debian packages and PyPI; nothing is fetched at run time:
#   Java 17 (openjdk-17-jre-headless) and Python 3.11 from Debian bookworm; a virtualenv holding
#   exactly requirements.lock (hash-checked) plus the project; Spark = the venv's pyspark
#   (SPARK_HOME) with only pyspark's own jars (the job reads Kafka with confluent-kafka and files and
#   tables through pyiceberg's FileIO, so no Spark connector). tini is PID 1; the user is `spark`
#   (uid 185).
#
# Base image (build argument BASE_IMAGE): any Debian bookworm root filesystem.
#   docker build -t icebergsync:dev .                                  # public debian:bookworm-slim
#   docker build --build-arg BASE_IMAGE=<local image> --network=host -t icebergsync:dev .
# scripts/infra/image.sh builds it the second way from a debootstrap base (no registry needed).
# Extra CA certificates a build machine's TLS proxy needs go in docker/ca-certificates/*.crt: they
# are trusted by the build stage only, never by the final image.
ARG BASE_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------------------------
# What every container needs at run time.
FROM ${BASE_IMAGE} AS runtime
ARG spark_uid=185
ENV LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive
# tini (PID 1), nss_wrapper (a passwd entry for arbitrary uids, as Spark's image), procps (ps, for
# Spark's scripts). man1 must exist for the JRE's update-alternatives on minimal roots.
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless python3 ca-certificates tini libnss-wrapper procps; \
    ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb; \
    groupadd --system --gid=${spark_uid} spark; \
    useradd --system --uid=${spark_uid} --gid=spark --home-dir /opt/icebergsync/work-dir --no-create-home spark

# ---------------------------------------------------------------------------------------------
# The virtualenv (the lock, Spark's jars with it), built with tools the final image does not carry.
FROM runtime AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
COPY docker/ca-certificates/ /usr/local/share/ca-certificates/
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends python3-venv; \
    update-ca-certificates

# Python dependencies: exactly requirements.lock, every file hash-checked, nothing resolved.
COPY requirements.lock /opt/icebergsync/requirements.lock
RUN set -eux; \
    python3 -m venv /opt/icebergsync/venv; \
    /opt/icebergsync/venv/bin/pip install --no-deps --require-hashes -r /opt/icebergsync/requirements.lock

RUN /opt/icebergsync/venv/bin/python -m compileall -q /opt/icebergsync/venv

# ---------------------------------------------------------------------------------------------
# The project, built as a wheel with the locked build backend (setuptools, wheel from
# requirements-dev.lock, hash-checked, in a throw-away venv). A stage of its own: a source change
# rebuilds only this wheel and the small final layers, never the venv layer above.
FROM build AS wheel
COPY requirements-dev.lock /build/requirements-dev.lock
RUN set -eux; \
    awk '/^[^ #]/ { keep = ($0 ~ /^(setuptools|wheel)==/) } keep' /build/requirements-dev.lock >/build/backend.txt; \
    python3 -m venv /build/backend; \
    /build/backend/bin/pip install --no-deps --require-hashes -r /build/backend.txt
COPY pyproject.toml /build/src/pyproject.toml
COPY icebergsync /build/src/icebergsync
COPY spark_app /build/src/spark_app
COPY operator /build/src/operator
RUN /build/backend/bin/pip wheel --no-deps --no-build-isolation -w /build/wheels /build/src

# ---------------------------------------------------------------------------------------------
FROM runtime
ENV VIRTUAL_ENV=/opt/icebergsync/venv \
    SPARK_HOME=/opt/icebergsync/venv/lib/python3.11/site-packages/pyspark \
    JAVA_HOME=/usr/lib/jvm/java-17 \
    PYSPARK_PYTHON=/opt/icebergsync/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/icebergsync/venv/bin/python \
    PYTHONUNBUFFERED=1
ENV PATH=${VIRTUAL_ENV}/bin:${PATH}
COPY --from=build /opt/icebergsync/venv /opt/icebergsync/venv
# The project: installed into the venv without dependencies (they are all there), and its job's
# sources kept under /opt/icebergsync, where mainApplicationFile points.
COPY --from=wheel /build/wheels/ /tmp/wheels/
COPY spark_app /opt/icebergsync/spark_app
COPY docker/entrypoint.sh /opt/entrypoint.sh
RUN set -eux; \
    pip install --no-cache-dir --disable-pip-version-check --no-deps /tmp/wheels/icebergsync-*.whl; \
    rm -rf /tmp/wheels; \
    pip check; \
    python -m compileall -q /opt/icebergsync/spark_app \
      "$VIRTUAL_ENV"/lib/python3.11/site-packages/icebergsync \
      "$VIRTUAL_ENV"/lib/python3.11/site-packages/spark_app \
      "$VIRTUAL_ENV"/lib/python3.11/site-packages/icebergsync_operator; \
    install -d -o spark -g spark /opt/icebergsync/work-dir; \
    icebergsync --version; \
    icebergsync-operator --help >/dev/null; \
    python /opt/icebergsync/spark_app/main.py --help >/dev/null

WORKDIR /opt/icebergsync/work-dir
USER 185
# tini reaps and forwards signals; the entrypoint maps the Spark Operator's `driver` / `executor`
# calls to Spark and runs anything else as given.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/entrypoint.sh"]
CMD ["icebergsync", "--help"]
