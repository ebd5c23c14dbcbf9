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
