package icebergsync.testinfra;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Debezium's embedded engine writing JSON change events to Kafka, one topic per captured table, as
 * Kafka Connect's runtime would: the message key and value from Kafka Connect's JsonConverter
 * (converter.schemas.enable as configured), partitioned by the key with Kafka's default partitioner,
 * a delete followed by its tombstone. Each batch is produced and flushed before its offsets are
 * marked processed (at least once, as Connect).
 *
 * <p>Usage: {@code DebeziumToKafka <engine.properties>}. The file holds the engine's and the
 * connector's settings plus {@code kafka.bootstrap.servers}. Prints {@code debezium: task started}
 * once the connector's task runs, {@code debezium: produced N} after each batch, and exits non-zero
 * with the engine's error when it stops on one.
 */
public final class DebeziumToKafka {
  private DebeziumToKafka() {}

  private static byte[] bytes(String text) {
    return text == null ? null : text.getBytes(StandardCharsets.UTF_8);
  }

  public static void main(String[] args) throws Exception {
    Properties config = new Properties();
    try (InputStream in = new FileInputStream(args[0])) {
      config.load(in);
    }
    Properties producerConfig = new Properties();
    producerConfig.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, config.getProperty("kafka.bootstrap.servers"));
    producerConfig.put(ProducerConfig.ACKS_CONFIG, "all");
    producerConfig.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    producerConfig.put(ProducerConfig.LINGER_MS_CONFIG, "5");
    KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(producerConfig, new ByteArraySerializer(), new ByteArraySerializer());

    CountDownLatch stopped = new CountDownLatch(1);
    int[] status = {0};
    DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
        .using(config)
        .using(new DebeziumEngine.ConnectorCallback() {
          @Override
          public void taskStarted() {
            System.out.println("debezium: task started");
            System.out.flush();
          }
        })
        .using((success, message, error) -> {
          if (!success) {
            System.out.println("debezium: stopped with an error: " + message);
            if (error != null) {
              error.printStackTrace(System.out);
            }
            status[0] = 1;
          }
          System.out.flush();
          stopped.countDown();
        })
        .notifying((List<ChangeEvent<String, String>> batch,
                    DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
          for (ChangeEvent<String, String> event : batch) {
            producer.send(new ProducerRecord<>(event.destination(), bytes(event.key()), bytes(event.value())));
          }
          producer.flush();
          for (ChangeEvent<String, String> event : batch) {
            committer.markProcessed(event);
          }
          committer.markBatchFinished();
          System.out.println("debezium: produced " + batch.size());
          System.out.flush();
        })
        .build();

    ExecutorService executor = Executors.newSingleThreadExecutor();
    executor.execute(engine);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        engine.close();
        stopped.await();
      } catch (Exception e) {
        e.printStackTrace();
      }
      producer.close();
    }));
    stopped.await();
    executor.shutdown();
    producer.close();
    System.exit(status[0]);
  }
}
