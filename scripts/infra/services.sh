#!/usr/bin/env bash
# Fetch and build the real servers and Spark jars the test suite uses, into the cache
# ($ICEBERGSYNC_CACHE, default ~/.cache/icebergsync). Idempotent and quiet when cached: every part
# is keyed by what pins it (its pom's content, the MinIO module version, the helper sources) and is
# built in a temp dir then renamed into place, so an interrupted run never leaves a half cache.
#
#   scripts/infra/services.sh [PART...]     PART: all (default) | jars | spark | kafka | rest | debezium | postgres | mariadb | prometheus | minio | nessie | registry
#     spark     Spark jar bundles: jars/iceberg-spark, jars/kafka-connector           (Maven)
#     kafka     KRaft Kafka broker classpath + a small admin/produce/consume helper  (Maven, javac)
#     rest      Iceberg REST catalog server classpath + a 127.0.0.1 launcher         (Maven, javac)
#     debezium  Debezium's embedded engine + PostgreSQL connector + a runner         (Maven, javac)
#     postgres  PostgreSQL server binaries, unpacked (scripts/infra/postgres.sh)     (Debian packages)
#     mariadb   MariaDB server binaries, unpacked (scripts/infra/mariadb.sh), and    (Debian packages)
#               Debezium's embedded engine + MariaDB connector + the same runner      (Maven, javac)
#     prometheus Prometheus and promtool, unpacked (scripts/infra/prometheus.sh)      (Debian packages)
#     minio     MinIO server built from its Go module                                 (go install)
#     nessie    Project Nessie's server (Quarkus runner jar; not part of "all")        (Maven)
#     registry  Apicurio Registry's server (its Quarkus fast-jar distribution, unpacked) (Maven)
#     jars      spark + kafka + rest + debezium + mariadb's Debezium + registry (everything from Maven but Nessie)
#
# Sources: Maven Central (through mvn), the Go module proxy (through go) and, for PostgreSQL, MariaDB and Prometheus,
# Debian's packages (apt-get download, no install).
source "$(dirname "$0")/../lib.sh"

INFRA_DIR="$REPO_ROOT/scripts/infra"
POMS="$INFRA_DIR/maven"
CACHE="$ICEBERGSYNC_CACHE"
M2_REPO="${ICEBERGSYNC_M2_REPO:-$CACHE/m2}"

# MinIO: the Go module proxy serves github.com/minio/minio only as pseudo-versions; this is the
# final commit of the (now archived) upstream repository. It needs Go >= 1.24.
MINIO_MODULE="github.com/minio/minio"
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"

key_of() { cat "$@" | sha256sum | cut -c1-16; }
have_stamp() { [[ -f "$1/.stamp" && "$(cat "$1/.stamp")" == "$2" ]]; }

mvn_copy() { # pom outdir [extra mvn args...]: copy the pom's runtime dependency closure into outdir
  local pom="$1" out="$2"; shift 2
  command -v mvn >/dev/null || { log "mvn is required (apt-get install maven)"; return 1; }
  mvn -B -q -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$M2_REPO" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$out" -Dmdep.overWriteReleases=true "$@"
}

# Publish a freshly built dir atomically: tmp -> dest (the old one is removed only after success).
publish() { # tmpdir dest key
  echo "$3" >"$1/.stamp"
  rm -rf "$2.old"
  [[ -e "$2" ]] && mv "$2" "$2.old"
  mv "$1" "$2"
  rm -rf "$2.old"
}

pyspark_jars_dir() {
  local d
  for d in "$VENV"/lib/python3*/site-packages/pyspark/jars; do
    [[ -d "$d" ]] && { echo "$d"; return 0; }
  done
  log "pyspark is not installed in $VENV: run scripts/bootstrap.sh first"
  return 1
}

# artifactIds of the jars pyspark already ships (file name minus "-<version>.jar"), comma-joined.
pyspark_artifact_ids() {
  ls "$1" | sed -E 's/-[0-9][^-]*(-[A-Za-z0-9._]+)?\.jar$//; s/\.jar$//' | sort -u | paste -sd, -
}

# ---------------------------------------------------------------------------------------------
# 1. Spark jar bundles
do_spark() {
  local jars_dir spark_ids bundle pom key tmp
  jars_dir="$(pyspark_jars_dir)"
  spark_ids="$(pyspark_artifact_ids "$jars_dir")"
  for bundle in iceberg-spark kafka-connector; do
    pom="$POMS/$bundle.xml"
    key="$(printf '%s\n%s\n' "$(cat "$pom")" "$spark_ids" | sha256sum | cut -c1-16)"
    have_stamp "$CACHE/jars/$bundle" "$key" && continue
    log "fetching Spark bundle $bundle"
    mkdir -p "$CACHE/jars"
    tmp="$(mktemp -d "$CACHE/jars/.$bundle.XXXXXX")"
    mvn_copy "$pom" "$tmp" -DexcludeArtifactIds="$spark_ids"
    publish "$tmp" "$CACHE/jars/$bundle" "$key"
    log "  $(ls "$CACHE/jars/$bundle" | wc -l) jars, $(du -sh "$CACHE/jars/$bundle" | cut -f1) in $CACHE/jars/$bundle"
  done
}

# ---------------------------------------------------------------------------------------------
# 2. Kafka broker (KRaft) + test client helper
# The helper is one long-lived JVM the Python fixture talks to over stdin/stdout (one request per
# line, tab-separated, binary fields base64) for admin work and plain produce/consume, independent of
# the Python client under test (confluent-kafka); it pays the JVM start once. The broker's TLS and
# SASL listeners (certificates, SCRAM users) are set up per run by tests/infra/services.py. Reply: "ok<TAB>N" then N data lines, or "err<TAB>message". Source: scripts/infra/kafka/src.
KAFKA_HELPER_SRC="$INFRA_DIR/kafka/src"

java_sources_key() { # pom source_root: cache key of a classpath (the pom) and the sources compiled against it
  local pom="$1" root="$2" file text=""
  while IFS= read -r file; do text+="$(cat "$file")"$'\n'; done < <(find "$root" -name '*.java' | LC_ALL=C sort)
  printf '%s\n%s' "$(cat "$pom")" "$text" | sha256sum | cut -c1-16
}

compile_java() { # classes_dir classpath_dir source_root: compile every .java file under source_root
  local classes="$1" libdir="$2" root="$3"
  command -v javac >/dev/null || { log "javac is required (a JDK 17)"; return 1; }
  mkdir -p "$classes"
  find "$root" -name '*.java' -print0 | LC_ALL=C sort -z \
    | xargs -0 javac -nowarn -encoding UTF-8 --release 17 -cp "$libdir/*" -d "$classes"
}

java_part() { # name pom source_root: a pom's runtime closure in $CACHE/<name>/lib, the sources compiled into classes
  local name="$1" pom="$2" src="$3" dest="$CACHE/$1" key tmp
  key="$(java_sources_key "$pom" "$src")"
  have_stamp "$dest" "$key" && return 0
  log "fetching the $name classpath"
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.$name.XXXXXX")"
  mvn_copy "$pom" "$tmp/lib"
  compile_java "$tmp/classes" "$tmp/lib" "$src"
  publish "$tmp" "$dest" "$key"
  log "  $(ls "$dest/lib" | wc -l) jars, $(du -sh "$dest" | cut -f1) in $dest"
}

do_kafka() { java_part kafka "$POMS/kafka-broker.xml" "$KAFKA_HELPER_SRC"; }

# ---------------------------------------------------------------------------------------------
# 3. Iceberg REST catalog server
# Upstream RESTCatalogServer binds Jetty to all interfaces; this launcher runs the same pieces
# (its CatalogContext + RESTServerCatalogAdapter + RESTCatalogServlet, hence the package) on
# 127.0.0.1. Catalog properties: CATALOG_* environment variables as upstream (CATALOG_IO__IMPL ->
# io-impl), then key=value arguments. Prints "REST catalog listening on <uri>" when serving.
# Source: scripts/infra/rest-catalog/src.
REST_LAUNCHER_SRC="$INFRA_DIR/rest-catalog/src"

do_rest() { java_part rest-catalog "$POMS/rest-catalog.xml" "$REST_LAUNCHER_SRC"; }

# ---------------------------------------------------------------------------------------------
# 4. Debezium: the embedded engine with the PostgreSQL connector (pgoutput), and a runner that writes
# its JSON change events (Kafka Connect's JsonConverter) to the suite's Kafka broker, one topic per
# table. Source: scripts/infra/debezium/src; started by tests/integration/cdc_postgres/servers.py.
do_debezium() { java_part debezium "$POMS/debezium.xml" "$INFRA_DIR/debezium/src"; }

# 5. PostgreSQL from Debian's packages (pinned .deb files, unpacked, not installed).
do_postgres() { bash "$INFRA_DIR/postgres.sh"; }

# 5b. MariaDB: the server from Debian's packages (pinned .deb files, unpacked, not installed), and Debezium's
# MariaDB connector with the embedded engine of its own version (3.5.0.Final, the newest Maven Central has;
# debezium.xml's 3.6.1 MySQL connector no longer reads MariaDB), so its own classpath in
# $CACHE/debezium-mariadb; the same runner (scripts/infra/debezium/src) compiled against it. Started by
# tests/integration/cdc_mariadb/servers.py. Cold: ~15 s with an empty Maven repository (4 .debs, 59 MB unpacked: 5 s;
# the classpath, 41 MB: 10 s), ~7 s when the repository already holds the other parts' artifacts.
do_debezium_mariadb() { java_part debezium-mariadb "$POMS/debezium-mariadb.xml" "$INFRA_DIR/debezium/src"; }
do_mariadb() { bash "$INFRA_DIR/mariadb.sh"; do_debezium_mariadb; }
do_prometheus() { bash "$INFRA_DIR/prometheus.sh"; }

# ---------------------------------------------------------------------------------------------
# 6. MinIO, built from source through the Go module proxy
do_minio() {
  local bin="$CACHE/bin/minio" tmp gover
  [[ -x "$bin" && -f "$bin.version" && "$(cat "$bin.version")" == "$MINIO_VERSION" ]] && return 0
  command -v go >/dev/null || { log "go (>= 1.24) is required to build MinIO"; return 1; }
  gover="$(go env GOVERSION)"; gover="${gover#go}"
  if [[ "$(printf '%s\n1.24\n' "$gover" | sort -V | head -1)" != "1.24" ]]; then
    log "go >= 1.24 is required to build MinIO (have $gover)"; return 1
  fi
  log "building MinIO $MINIO_VERSION (takes ~4 min on 2 cores when cold)"
  mkdir -p "$CACHE/bin"
  tmp="$(mktemp -d "$CACHE/.minio.XXXXXX")"
  # Private module/build caches: thrown away afterwards so the cache keeps only the binary.
  # GOTOOLCHAIN=local: never try to download another Go toolchain.
  if ! env GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$tmp/bin" \
      GOMODCACHE="$tmp/mod" GOCACHE="$tmp/gocache" \
      go install -trimpath -ldflags "-s -w" "$MINIO_MODULE@$MINIO_VERSION" >"$tmp/build.log" 2>&1; then
    tail -30 "$tmp/build.log" >&2
    chmod -R u+w "$tmp"; rm -rf "$tmp"
    return 1
  fi
  mv "$tmp/bin/minio" "$bin.new"
  mv "$bin.new" "$bin"
  echo "$MINIO_VERSION" >"$bin.version"
  chmod -R u+w "$tmp"; rm -rf "$tmp"
  log "  $bin ($(du -h "$bin" | cut -f1))"
}

# ---------------------------------------------------------------------------------------------
# 7. Project Nessie's server: the Quarkus runner jar (an uber-jar, ~240 MB), for the tests of an Iceberg
# REST catalog whose POST /v1/transactions/commit is atomic (tests/integration/test_rest_atomic_cut.py).
# Maven Central lists nessie-quarkus only at 0.60.1 and 0.99.0 (later releases publish the runner elsewhere);
# 0.99.0 serves Iceberg REST under /iceberg. Not in "all": only that test needs it.
NESSIE_VERSION="0.99.0"
mvn_artifact() { # goal artifact outdir: the dependency plugin's copy (or unpack) of one artifact into outdir
  command -v mvn >/dev/null || { log "mvn is required (apt-get install maven)"; return 1; }
  mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$M2_REPO" \
    "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:$1" -Dartifact="$2" -DoutputDirectory="$3"
}

do_nessie() {
  local dest="$CACHE/nessie" tmp
  have_stamp "$dest" "$NESSIE_VERSION" && return 0
  log "fetching Nessie's server $NESSIE_VERSION"
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.nessie.XXXXXX")"
  mvn_artifact copy "org.projectnessie.nessie:nessie-quarkus:$NESSIE_VERSION:jar:runner" "$tmp"
  mv "$tmp/nessie-quarkus-$NESSIE_VERSION-runner.jar" "$tmp/nessie-quarkus-runner.jar"
  publish "$tmp" "$dest" "$NESSIE_VERSION"
  log "  $(du -sh "$dest" | cut -f1) in $dest"
}

# ---------------------------------------------------------------------------------------------
# 8. Apicurio Registry, a Schema Registry whose Confluent-compatible API (/apis/ccompat/v7) serves the Confluent
# wire format's schema ids (issue 36). Maven Central has apicurio-registry-app 3.3.3 both as a jar of the
# application's classes, which no Quarkus build can make runnable here (its apicurio-registry-schema-util-provider
# is on no registry this machine reaches), and as the release's own Quarkus fast-jar distribution, classifier
# "all" (tar.gz, 159 MB): that one, unpacked into $CACHE/apicurio-registry (quarkus-run.jar, lib/, app/, quarkus/).
# It is built for Java 21 (tests/infra/services.py java_21()). Started by tests/integration/schema_registry.py.
APICURIO_VERSION="3.3.3"
do_registry() {
  local dest="$CACHE/apicurio-registry" tmp
  have_stamp "$dest" "$APICURIO_VERSION" && return 0
  log "fetching Apicurio Registry $APICURIO_VERSION"
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.apicurio-registry.XXXXXX")"
  # From the temp dir: unpack leaves its markers under ./${project.basedir}/target (no property moves them).
  ( cd "$tmp" && mvn_artifact unpack "io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" "$tmp/dist" )
  [[ -f "$tmp/dist/quarkus-run.jar" ]] || { log "no quarkus-run.jar in Apicurio Registry's distribution"; rm -rf "$tmp"; return 1; }
  publish "$tmp/dist" "$dest" "$APICURIO_VERSION"
  rm -rf "$tmp"
  log "  $(du -sh "$dest" | cut -f1) in $dest"
}

# ---------------------------------------------------------------------------------------------
parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(all)
# One run at a time per cache (concurrent pytest sessions, CI steps).
exec 9>"$CACHE/.services.lock"
flock 9
for part in "${parts[@]}"; do
  case "$part" in
    all)
      # The MinIO build is CPU-bound and the Maven fetches network-bound: overlap them.
      ( do_minio ) & minio_pid=$!
      do_spark; do_kafka; do_rest; do_debezium; do_postgres; do_mariadb; do_prometheus; do_registry
      wait "$minio_pid" ;;
    jars) do_spark; do_kafka; do_rest; do_debezium; do_debezium_mariadb; do_registry ;;
    spark) do_spark ;;
    kafka) do_kafka ;;
    rest) do_rest ;;
    debezium) do_debezium ;;
    postgres) do_postgres ;;
    mariadb) do_mariadb ;;
    prometheus) do_prometheus ;;
    minio) do_minio ;;
    nessie) do_nessie ;;
    registry) do_registry ;;
    *) log "unknown part '$part' (all|jars|spark|kafka|rest|debezium|postgres|mariadb|prometheus|minio|nessie|registry)"; exit 2 ;;
  esac
done
