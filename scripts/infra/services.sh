#!/usr/bin/env bash
# Fetch and build the real servers and Spark jars the test suite uses, into the cache
# ($ICEBERGSYNC_CACHE, default ~/.cache/icebergsync). Idempotent and quiet when cached: every part
# is keyed by what pins it (its pom's content, the MinIO module version, the helper sources) and is
# built in a temp dir then renamed into place, so an interrupted run never leaves a half cache.
#
#   scripts/infra/services.sh [PART...]     PART: all (default) | jars | spark | kafka | rest | minio
#     spark  Spark jar bundles: jars/iceberg-spark, jars/kafka-connector, jars/s3a   (Maven)
#     kafka  KRaft Kafka broker classpath + a small admin/produce/consume helper  (Maven, javac)
#     rest   Iceberg REST catalog server classpath + a 127.0.0.1 launcher         (Maven, javac)
#     minio  MinIO server built from its Go module                                 (go install)
#     jars   spark + kafka + rest (everything that comes from Maven)
#
# Sources: Maven Central (through mvn) and the Go module proxy (through go) only.
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
  for bundle in iceberg-spark kafka-connector s3a; do
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
# line, tab-separated, binary fields base64), so tests need no Python Kafka client and pay the JVM
# start once. Reply: "ok<TAB>N" then N data lines, or "err<TAB>message".
KAFKA_HELPER_SRC=$(cat <<'JAVA'
package icebergsync.testinfra;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** Line-protocol Kafka client for the Python test fixtures (see scripts/infra/services.sh). */
public final class KafkaTestClient {
  private static final long TIMEOUT_S = 60;
  private static final Base64.Decoder B64D = Base64.getDecoder();
  private static final Base64.Encoder B64E = Base64.getEncoder();

  private final String bootstrap;
  private final Admin admin;
  private KafkaProducer<byte[], byte[]> producer;

  private KafkaTestClient(String bootstrap) {
    this.bootstrap = bootstrap;
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("request.timeout.ms", "30000");
    p.put("default.api.timeout.ms", "60000");
    this.admin = Admin.create(p);
  }

  public static void main(String[] args) throws Exception {
    // The protocol owns stdout; anything a library prints goes to stderr.
    PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, "UTF-8");
    System.setOut(System.err);
    KafkaTestClient client = new KafkaTestClient(args[0]);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isEmpty()) continue;
      String[] f = line.split("\t", -1);
      List<String> reply = new ArrayList<>();
      try {
        if (f[0].equals("quit")) break;
        client.handle(f, in, reply);
        out.print("ok\t" + reply.size() + "\n");
        for (String r : reply) out.print(r + "\n");
      } catch (Throwable t) {
        Throwable c = t.getCause() != null ? t.getCause() : t;
        out.print("err\t" + (c.getClass().getSimpleName() + ": " + c.getMessage()).replace('\n', ' ') + "\n");
      }
      out.flush();
    }
    if (client.producer != null) client.producer.close(Duration.ofSeconds(5));
    client.admin.close(Duration.ofSeconds(5));
  }

  private static byte[] dec(String s) {
    return s.equals("-") ? null : B64D.decode(s);
  }

  private static String enc(byte[] b) {
    return b == null ? "-" : B64E.encodeToString(b);
  }

  private List<TopicPartition> partitions(String topic) throws Exception {
    TopicDescription d =
        admin.describeTopics(List.of(topic)).allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS).get(topic);
    List<TopicPartition> tps = new ArrayList<>();
    for (TopicPartitionInfo i : d.partitions()) tps.add(new TopicPartition(topic, i.partition()));
    return tps;
  }

  private Map<Integer, Long> offsets(String topic, OffsetSpec spec) throws Exception {
    Map<TopicPartition, OffsetSpec> req = new HashMap<>();
    for (TopicPartition tp : partitions(topic)) req.put(tp, spec);
    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res =
        admin.listOffsets(req).all().get(TIMEOUT_S, TimeUnit.SECONDS);
    Map<Integer, Long> m = new TreeMap<>();
    res.forEach((tp, info) -> m.put(tp.partition(), info.offset()));
    return m;
  }

  private void handle(String[] f, BufferedReader in, List<String> reply) throws Exception {
    switch (f[0]) {
      case "ping": // ping -> cluster id once a broker answers
        reply.add(admin.describeCluster().clusterId().get(TIMEOUT_S, TimeUnit.SECONDS));
        break;
      case "create_topic": { // create_topic NAME PARTITIONS [k=v ...]
        Map<String, String> cfg = new HashMap<>();
        for (int i = 3; i < f.length; i++) {
          String[] kv = f[i].split("=", 2);
          cfg.put(kv[0], kv[1]);
        }
        NewTopic t = new NewTopic(f[1], Integer.parseInt(f[2]), (short) 1).configs(cfg);
        admin.createTopics(List.of(t)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        // wait until every partition has a leader, so producing right away does not race
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
        while (true) {
          try {
            TopicDescription d =
                admin.describeTopics(List.of(f[1])).allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS).get(f[1]);
            if (d.partitions().size() == Integer.parseInt(f[2])
                && d.partitions().stream().allMatch(p -> p.leader() != null)) break;
          } catch (Exception e) {
            if (System.nanoTime() > deadline) throw e;
          }
          if (System.nanoTime() > deadline) throw new IllegalStateException("topic not ready: " + f[1]);
          Thread.sleep(50);
        }
        break;
      }
      case "delete_topic":
        admin.deleteTopics(List.of(f[1])).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        break;
      case "list_topics":
        reply.addAll(new java.util.TreeSet<>(admin.listTopics().names().get(TIMEOUT_S, TimeUnit.SECONDS)));
        break;
      case "produce": { // produce TOPIC N, then N lines "PARTITION|-\tKEY\tVALUE" -> N lines "PARTITION\tOFFSET"
        int n = Integer.parseInt(f[2]);
        List<String[]> recs = new ArrayList<>();
        for (int i = 0; i < n; i++) recs.add(in.readLine().split("\t", -1));
        if (producer == null) {
          Properties p = new Properties();
          p.put("bootstrap.servers", bootstrap);
          p.put("acks", "all");
          p.put("enable.idempotence", "true");
          p.put("linger.ms", "5");
          p.put("key.serializer", ByteArraySerializer.class.getName());
          p.put("value.serializer", ByteArraySerializer.class.getName());
          producer = new KafkaProducer<>(p);
        }
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (String[] r : recs) {
          Integer part = r[0].equals("-") ? null : Integer.valueOf(r[0]);
          futures.add(producer.send(new ProducerRecord<>(f[1], part, dec(r[1]), dec(r[2]))));
        }
        producer.flush();
        for (Future<RecordMetadata> fu : futures) {
          RecordMetadata md = fu.get(TIMEOUT_S, TimeUnit.SECONDS);
          reply.add(md.partition() + "\t" + md.offset());
        }
        break;
      }
      case "end_offsets": // end_offsets TOPIC -> "PARTITION\tOFFSET" lines
        offsets(f[1], OffsetSpec.latest()).forEach((p, o) -> reply.add(p + "\t" + o));
        break;
      case "begin_offsets":
        offsets(f[1], OffsetSpec.earliest()).forEach((p, o) -> reply.add(p + "\t" + o));
        break;
      case "delete_records": { // delete_records TOPIC PARTITION BEFORE_OFFSET -> new low watermark
        TopicPartition tp = new TopicPartition(f[1], Integer.parseInt(f[2]));
        Map<TopicPartition, RecordsToDelete> req = Map.of(tp, RecordsToDelete.beforeOffset(Long.parseLong(f[3])));
        DeletedRecords dr = admin.deleteRecords(req).lowWatermarks().get(tp).get(TIMEOUT_S, TimeUnit.SECONDS);
        reply.add(Long.toString(dr.lowWatermark()));
        break;
      }
      case "consume": { // consume TOPIC TIMEOUT_MS ISOLATION -> everything from the start up to the end offsets
        String topic = f[1];
        long timeoutMs = Long.parseLong(f[2]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", f.length > 3 ? f[3] : "read_uncommitted");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
          List<TopicPartition> tps = partitions(topic);
          c.assign(tps);
          c.seekToBeginning(tps);
          Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(TIMEOUT_S));
          long deadline = System.currentTimeMillis() + timeoutMs;
          while (System.currentTimeMillis() < deadline) {
            boolean done = true;
            for (TopicPartition tp : tps) if (c.position(tp) < end.get(tp)) done = false;
            if (done) break;
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
              reply.add(r.partition() + "\t" + r.offset() + "\t" + enc(r.key()) + "\t" + enc(r.value()));
            }
          }
        }
        break;
      }
      default:
        throw new IllegalArgumentException("unknown command " + f[0]);
    }
  }
}
JAVA
)

compile_java() { # classes_dir classpath_dir source_text relative_source_path
  local classes="$1" libdir="$2" src="$3" rel="$4" srcdir
  command -v javac >/dev/null || { log "javac is required (a JDK 17)"; return 1; }
  srcdir="$(dirname "$classes")/src"
  mkdir -p "$srcdir/$(dirname "$rel")" "$classes"
  printf '%s\n' "$src" >"$srcdir/$rel"
  javac -nowarn -encoding UTF-8 --release 17 -cp "$libdir/*" -d "$classes" "$srcdir/$rel"
}

do_kafka() {
  local dest="$CACHE/kafka" key tmp
  key="$(printf '%s\n%s\n' "$(cat "$POMS/kafka-broker.xml")" "$KAFKA_HELPER_SRC" | sha256sum | cut -c1-16)"
  have_stamp "$dest" "$key" && return 0
  log "fetching the Kafka broker classpath"
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.kafka.XXXXXX")"
  mvn_copy "$POMS/kafka-broker.xml" "$tmp/lib"
  compile_java "$tmp/classes" "$tmp/lib" "$KAFKA_HELPER_SRC" icebergsync/testinfra/KafkaTestClient.java
  publish "$tmp" "$dest" "$key"
  log "  $(ls "$dest/lib" | wc -l) jars, $(du -sh "$dest" | cut -f1) in $dest"
}

# ---------------------------------------------------------------------------------------------
# 3. Iceberg REST catalog server
# Upstream RESTCatalogServer binds Jetty to all interfaces; this launcher runs the same pieces
# (its CatalogContext + RESTServerCatalogAdapter + RESTCatalogServlet, hence the package) on
# 127.0.0.1. Catalog properties: CATALOG_* environment variables as upstream (CATALOG_IO__IMPL ->
# io-impl), then key=value arguments. Prints "REST catalog listening on <uri>" when serving.
REST_LAUNCHER_SRC=$(cat <<'JAVA'
package org.apache.iceberg.rest;

import java.net.InetSocketAddress;
import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/** Usage: LoopbackRESTCatalogServer HOST PORT [key=value ...] */
public final class LoopbackRESTCatalogServer {
  private LoopbackRESTCatalogServer() {}

  public static void main(String[] args) throws Exception {
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    Map<String, String> props = new HashMap<>(RCKUtils.environmentCatalogConfig());
    for (int i = 2; i < args.length; i++) {
      String[] kv = args[i].split("=", 2);
      props.put(kv[0], kv[1]);
    }
    props.putIfAbsent("catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog");
    props.putIfAbsent("uri", "jdbc:sqlite::memory:");
    props.putIfAbsent("jdbc.schema-version", "V1");
    if (!props.containsKey("warehouse")) throw new IllegalArgumentException("warehouse=... is required");
    String name = props.getOrDefault("catalog.name", "rest_backend");
    Catalog catalog = CatalogUtil.buildIcebergCatalog(name, props, new Configuration());

    RESTCatalogServer.CatalogContext ctx = new RESTCatalogServer.CatalogContext(catalog, props);
    RESTCatalogServlet servlet = new RESTCatalogServlet(new RESTServerCatalogAdapter(ctx));
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(servlet), "/*");
    context.insertHandler(new GzipHandler());
    Server server = new Server(new InetSocketAddress(host, port));
    server.setHandler(context);
    server.start();
    System.out.println("REST catalog listening on http://" + host + ":" + port);
    System.out.flush();
    server.join();
  }
}
JAVA
)

do_rest() {
  local dest="$CACHE/rest-catalog" key tmp
  key="$(printf '%s\n%s\n' "$(cat "$POMS/rest-catalog.xml")" "$REST_LAUNCHER_SRC" | sha256sum | cut -c1-16)"
  have_stamp "$dest" "$key" && return 0
  log "fetching the Iceberg REST catalog server classpath"
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.rest-catalog.XXXXXX")"
  mvn_copy "$POMS/rest-catalog.xml" "$tmp/lib"
  compile_java "$tmp/classes" "$tmp/lib" "$REST_LAUNCHER_SRC" org/apache/iceberg/rest/LoopbackRESTCatalogServer.java
  publish "$tmp" "$dest" "$key"
  log "  $(ls "$dest/lib" | wc -l) jars, $(du -sh "$dest" | cut -f1) in $dest"
}

# ---------------------------------------------------------------------------------------------
# 4. MinIO, built from source through the Go module proxy
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
      do_spark; do_kafka; do_rest
      wait "$minio_pid" ;;
    jars) do_spark; do_kafka; do_rest ;;
    spark) do_spark ;;
    kafka) do_kafka ;;
    rest) do_rest ;;
    minio) do_minio ;;
    *) log "unknown part '$part' (all|jars|spark|kafka|rest|minio)"; exit 2 ;;
  esac
done
