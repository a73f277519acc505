# One image for every orbitmq process on Kubernetes: name server, broker, sidecar (`orbitmq …`)
# and the operator (`orbitmq-operator`). The operator's builders start containers with
# `orbitmq namesrv|broker …` as uid 10001 on a read-only root filesystem (writable: the data
# volume and an emptyDir at /tmp), so the image runs as that user and writes nowhere else.
#
#   docker build -t orbitmq:dev .
#
# Two stages: the first compiles the C extension (orbitmq._native) and the wheels, the second
# holds only the installed packages, without a compiler.

FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY services ./services
COPY protos ./protos
COPY operator ./operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels . ./operator

FROM python:3.11-slim-bookworm
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
