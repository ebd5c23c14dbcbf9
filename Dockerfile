# syntax=docker/dockerfile:1
#
# ONE image for both sides of IcebergSync:
#   * the operator:  `icebergsync-operator`            (the Helm chart's Deployment command)
#   * the Spark job: local:///opt/icebergsync/spark_app/main.py
#                    (mainApplicationFile of every rendered SparkApplication; the Spark Operator
#                     starts driver and executors through Spark's /opt/entrypoint.sh)
#
# Spark 4.0.1 (Scala 2.13, Java 17) comes from the official Apache Spark image, the same version as
# the project's pinned pyspark; Python is the 3.11 line the project is tested on; the Java 17 runtime
# is Debian's. The Python dependencies are the exact pins of requirements.lock (the runtime closure
# of pyproject.toml with hashes, checked by tests/unit/test_lock.py). The Kafka connector and the S3A
# (hadoop-aws) jars are resolved from the same Maven poms the test suite uses
# (scripts/infra/maven/) and baked into $SPARK_HOME/jars, so they are on every driver's and
# executor's classpath with no spark.jars download at run time (ICEBERGSYNC_SPARK_JARS_PRESENT=1
# tells the job so: spark_app/session.py adds no spark.jars.packages).
#
#   docker build -t ghcr.io/icebergsync/icebergsync:0.1.0 .

ARG SPARK_IMAGE=spark:4.0.1-scala2.13-java17-ubuntu
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG MAVEN_IMAGE=maven:3.9-eclipse-temurin-17

# ---------------------------------------------------------------------------------------------
FROM ${SPARK_IMAGE} AS spark

# ---------------------------------------------------------------------------------------------
# Connector jars: the poms' runtime closure minus every artifact Spark already ships (as
# scripts/infra/services.sh does for the tests).
FROM ${MAVEN_IMAGE} AS jars
COPY --from=spark /opt/spark/jars /tmp/spark-jars
COPY scripts/infra/maven/kafka-connector.xml scripts/infra/maven/s3a.xml /build/poms/
RUN set -eux; \
    spark_ids="$(ls /tmp/spark-jars | sed -E 's/-[0-9][^-]*(-[A-Za-z0-9._]+)?\.jar$//; s/\.jar$//' | sort -u | paste -sd, -)"; \
    for bundle in kafka-connector s3a; do \
      mvn -B -q -f "/build/poms/$bundle.xml" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory=/build/jars -Dmdep.overWriteReleases=true \
        -DexcludeArtifactIds="$spark_ids"; \
    done; \
    ls -l /build/jars

# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

ARG spark_uid=185
ENV SPARK_HOME=/opt/spark \
    JAVA_HOME=/usr/lib/jvm/java-17 \
    PYSPARK_PYTHON=/usr/local/bin/python3 \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python3 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ICEBERGSYNC_SPARK_JARS_PRESENT=1
ENV PATH=${SPARK_HOME}/bin:${PATH}

# What Spark's own image installs for its entrypoint (tini, nss_wrapper for arbitrary uids, ps),
# plus the Java 17 runtime. The `spark` user (uid 185) as in the official Spark image.
RUN set -eux; \
    groupadd --system --gid=${spark_uid} spark; \
    useradd --system --uid=${spark_uid} --gid=spark --home-dir /nonexistent --no-create-home spark; \
    apt-get update; \
    apt-get install -y --no-install-recommends openjdk-17-jre-headless tini libnss-wrapper procps bash; \
    ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17; \
    rm -rf /var/lib/apt/lists/*

# Spark itself (jars, bin, python/lib/pyspark.zip) and its Kubernetes entrypoint, from the official image.
COPY --from=spark --chown=spark:spark /opt/spark /opt/spark
COPY --from=spark /opt/entrypoint.sh /opt/decom.sh /opt/
COPY --from=jars /build/jars/ /opt/spark/jars/

# Python dependencies first (exact pins; a layer that changes only with requirements.lock).
COPY requirements.lock /opt/icebergsync/requirements.lock
RUN pip install --no-deps --require-hashes -r /opt/icebergsync/requirements.lock

# The project: installed (console scripts icebergsync, icebergsync-operator) and kept as source
# under /opt/icebergsync, where the SparkApplication's mainApplicationFile points.
COPY pyproject.toml /opt/icebergsync/pyproject.toml
COPY icebergsync /opt/icebergsync/icebergsync
COPY spark_app /opt/icebergsync/spark_app
COPY operator /opt/icebergsync/operator
RUN set -eux; \
    pip install --no-deps /opt/icebergsync; \
    pip check; \
    rm -rf /opt/icebergsync/build /opt/icebergsync/*.egg-info; \
    python -m compileall -q /opt/icebergsync /usr/local/lib/python3.11/site-packages; \
    icebergsync-operator --help >/dev/null; \
    python /opt/icebergsync/spark_app/main.py --help >/dev/null; \
    test -f /opt/spark/jars/spark-sql-kafka-0-10_2.13-4.0.1.jar; \
    test -f /opt/spark/jars/hadoop-aws-3.4.1.jar

WORKDIR /opt/spark/work-dir
USER 185

# Spark's entrypoint: `driver` / `executor` for the Spark Operator's pods, anything else runs as
# given (the chart runs `icebergsync-operator`).
ENTRYPOINT ["/opt/entrypoint.sh"]
CMD ["icebergsync-operator", "--help"]
