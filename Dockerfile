# Images of orbitmq, from one Dockerfile:
#
#   docker build -t orbitmq:dev .                              the default target (last stage)
#   docker build --target spark -t orbitmq-spark:dev .         the Spark jobs' image
#
# orbitmq:dev is one image for every orbitmq process on Kubernetes: name server, broker,
# sidecar (`orbitmq …`) and the operator (`orbitmq-operator`). The operator's builders start
# containers with `orbitmq namesrv|broker …` as uid 10001 on a read-only root filesystem
# (writable: the data volume and an emptyDir at /tmp), so the image runs as that user and
# writes nowhere else.
#
# orbitmq-spark:dev runs the Spark jobs (spark-jobs/) as the SparkApplications of
# spark-jobs/manifests name them: a Java 17 runtime, `orbitmq[spark]` (PySpark, pyarrow, the
# orbitmq_spark data source), the jobs at /opt/orbitmq/spark-jobs/jobs and Spark's Kubernetes
# entrypoint (spark-jobs/docker/entrypoint.sh) as /opt/entrypoint.sh.
#
# The `build` stage compiles the C extension (orbitmq._native) and the wheels; the images hold
# only installed packages, without a compiler. The spark stage installs the JDK, then the
# dependencies (from pyproject.toml alone), then orbitmq's wheel: a change to the sources
# rebuilds only the last, small layers, never the JDK's or PySpark's (~0.6 GB).

FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY services ./services
COPY spark-jobs/orbitmq_spark ./spark-jobs/orbitmq_spark
COPY protos ./protos
COPY operator ./operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels . ./operator

# orbitmq's runtime requirements and its `spark` extra, read from pyproject.toml: the spark
# stage copies this file, so its pip layer is rebuilt only when these lines change.
FROM python:3.11-slim-bookworm AS spark-requirements
COPY pyproject.toml /src/pyproject.toml
RUN python3 -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]; \
print("\n".join(p["dependencies"] + p["optional-dependencies"]["spark"]))' > /requirements.txt

FROM python:3.11-slim-bookworm AS spark
# Debian's headless Java 17 runtime; JAVA_HOME through a link without the architecture. Its
# postinst links java.1.gz into /usr/share/man/man1, which slim images do not have (Debian
# #863199): the directory is made first and stays empty. libnss-wrapper: the entrypoint gives
# a uid without a passwd entry one (Java's user.home, Hadoop's user name). ca-certificates-java
# ran a JVM as root: its /tmp/hsperfdata_root goes.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    openjdk-17-jre-headless libnss-wrapper \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
 && /usr/lib/jvm/java-17/bin/java -XX:-UsePerfData -version \
 && rm -rf /tmp/hsperfdata_root
COPY --from=spark-requirements /requirements.txt /tmp/requirements.txt
# pip's pyspark is a whole Spark distribution (bin/spark-submit, jars, the Kubernetes resource
# manager): SPARK_HOME is a link to it, wherever the base's Python keeps its packages.
RUN pip install --no-cache-dir -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt \
 && ln -s "$(python3 -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark \
 && test -x /opt/spark/bin/spark-submit
# Only orbitmq's own wheel is new here (its dependencies are installed above). Copied, not
# bind-mounted with RUN --mount=from=build: buildah's layer cache does not look at a mount's
# content, so a changed wheel would not be installed.
COPY --from=build /wheels/orbitmq-*.whl /tmp/wheels/
RUN pip install --no-cache-dir --no-index --find-links /tmp/wheels 'orbitmq[spark]' \
 && rm -rf /tmp/wheels \
 && useradd --uid 10001 --create-home --home-dir /home/spark --shell /usr/sbin/nologin spark \
 && mkdir -p /opt/orbitmq/work-dir \
 && chown 10001 /opt/orbitmq/work-dir
COPY spark-jobs/docker/entrypoint.sh /opt/entrypoint.sh
COPY spark-jobs/jobs /opt/orbitmq/spark-jobs/jobs
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_HOME=/opt/spark \
    PYSPARK_PYTHON=python3 \
    PYSPARK_DRIVER_PYTHON=python3
# spark-submit and the Python workers may write beside them (e.g. spark-warehouse): a
# writable working directory, a home (Java's user.home, Ivy's cache) and /tmp (Spark's
# local dirs when no volume is given).
WORKDIR /opt/orbitmq/work-dir
USER 10001
ENTRYPOINT ["/opt/entrypoint.sh"]

FROM python:3.11-slim-bookworm AS orbitmq
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels orbitmq orbitmq-operator \
 && rm -rf /wheels \
 && useradd --uid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin orbitmq
USER 10001
# The broker's data volume is mounted here by the operator's StatefulSets.
VOLUME ["/var/lib/orbitmq"]
EXPOSE 9876 10911 10912 9100
ENTRYPOINT ["orbitmq"]
CMD ["--help"]
