#!/usr/bin/env bash
# The container entrypoint Spark's Kubernetes pods expect, as Spark's own image has it
# (/opt/entrypoint.sh there): spark-submit in cluster mode makes the driver pod with args
# `driver ...` and the driver makes executor pods with args `executor`, leaving the command
# to the image.  One copy serves both places that need it: the orbitmq-spark image (the
# Dockerfile's `spark` stage, its ENTRYPOINT) and the test bed's host runtime
# (tests/e2e/sparkopkit.host_runtime_templates sets it as the pods' command).
#   driver ARGS...  spark-submit in client mode inside the driver pod (ARGS: the
#                   --properties-file, --class and application spark-submit in cluster mode
#                   put into the pod's args)
#   executor        the executor backend, from the environment Spark sets on executor pods
# Needs SPARK_HOME and JAVA_HOME (PYSPARK_PYTHON for Python applications); exits 64 on any
# other first argument (run other commands with the container's command instead).
set -euo pipefail
: "${SPARK_HOME:?spark-entrypoint: SPARK_HOME is not set}"
: "${JAVA_HOME:?spark-entrypoint: JAVA_HOME is not set}"
export PATH="$JAVA_HOME/bin:$PATH"

# A uid without a passwd entry (a pod's runAsUser, OpenShift's random uids) leaves Java's
# user.home "?" (spark-submit then fails: "basedir must be absolute: ?/.ivy2...") and Hadoop
# without a user name: as Spark's own image does, give it one through nss_wrapper (the image
# has libnss-wrapper) with /tmp as its home.
if ! whoami >/dev/null 2>&1; then
    for wrapper in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
        if [ -s "$wrapper" ]; then
            NSS_WRAPPER_PASSWD=$(mktemp)
            NSS_WRAPPER_GROUP=$(mktemp)
            export LD_PRELOAD="$wrapper" NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
            printf 'spark:x:%s:%s:anonymous uid:/tmp:/bin/false\n' "$(id -u)" "$(id -g)" >"$NSS_WRAPPER_PASSWD"
            printf 'spark:x:%s:\n' "$(id -g)" >"$NSS_WRAPPER_GROUP"
            break
        fi
    done
fi

classpath="$SPARK_HOME/jars/*"
if [ -n "${SPARK_CONF_DIR:-}" ]; then
    classpath="$SPARK_CONF_DIR:$classpath"
fi

role=${1:-}
shift || true
case "$role" in
driver)
    exec "$SPARK_HOME/bin/spark-submit" \
        --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \
        --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \
        --deploy-mode client \
        "$@"
    ;;
executor)
    # SPARK_JAVA_OPT_0, _1, ...: the executor's JVM options, in their numeric order.
    java_opts=()
    while IFS= read -r opt; do
        java_opts+=("$opt")
    done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    exec "$JAVA_HOME/bin/java" "${java_opts[@]}" \
        -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
        -cp "$classpath" \
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
    echo "spark-entrypoint: unknown role '$role' (expected driver or executor)" >&2
    exit 64
    ;;
esac
