#!/bin/bash
# The image's entrypoint, run by tini (PID 1). Adapted from Apache Spark's Kubernetes entrypoint
# (resource-managers/kubernetes/docker/src/main/dockerfiles/spark/entrypoint.sh): the Spark
# Operator's driver and executor pods call the image with `driver ...` / `executor ...`; anything
# else (icebergsync-operator, icebergsync, bash) runs as given. tini is already PID 1 here, so the
# Spark commands are exec'd directly instead of under a second tini.
set -eo pipefail

# Spark's JVM wants a passwd entry for the current uid (Kubernetes may run the image as any uid).
attempt_setup_fake_passwd_entry() {
  local myuid mygid wrapper
  myuid="$(id -u)"
  getent passwd "$myuid" &>/dev/null && return 0
  for wrapper in {/usr,}/lib{/*,}/libnss_wrapper.so; do
    if [ -s "$wrapper" ]; then
      NSS_WRAPPER_PASSWD="$(mktemp)"
      NSS_WRAPPER_GROUP="$(mktemp)"
      export LD_PRELOAD="$wrapper" NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
      mygid="$(id -g)"
      printf 'spark:x:%s:%s:%s:%s:/bin/false\n' "$myuid" "$mygid" "${SPARK_USER_NAME:-anonymous uid}" "$SPARK_HOME" \
        >"$NSS_WRAPPER_PASSWD"
      printf 'spark:x:%s:\n' "$mygid" >"$NSS_WRAPPER_GROUP"
      break
    fi
  done
}

spark_classpath() {
  local classpath="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}${SPARK_HOME}/jars/*"
  [ -n "$SPARK_EXTRA_CLASSPATH" ] && classpath="$classpath:$SPARK_EXTRA_CLASSPATH"
  [ -n "${HADOOP_CONF_DIR+x}" ] && classpath="$HADOOP_CONF_DIR:$classpath"
  if [ -n "${SPARK_CONF_DIR+x}" ]; then
    classpath="$SPARK_CONF_DIR:$classpath"
  else
    classpath="$SPARK_HOME/conf:$classpath"
  fi
  # SPARK-43540: the working directory is on the executor classpath.
  echo "$classpath:$PWD"
}

case "$1" in
  driver)
    shift 1
    attempt_setup_fake_passwd_entry
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift 1
    executor_java_opts=()
    for v in "${!SPARK_JAVA_OPT_@}"; do
      executor_java_opts+=("${!v}")
    done
    attempt_setup_fake_passwd_entry
    exec "$JAVA_HOME/bin/java" \
      "${executor_java_opts[@]}" \
      -Xms"$SPARK_EXECUTOR_MEMORY" \
      -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$(spark_classpath)${SPARK_DIST_CLASSPATH:+:$SPARK_DIST_CLASSPATH}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    exec "$@"
    ;;
esac
