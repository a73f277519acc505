"""Run the containers of Spark pods on kwok's fake node as host processes: the test plays the
kubelet, so a SparkApplication runs for real (driver and executors, the entrypoint of
``sparkopkit.host_runtime_templates``) without the real node.

A pod's container is run as its spec says: its command and args, its environment (the
downward-API fields a kubelet fills in: the pod IP as 127.0.0.1, the pod's name), its
config-map and emptyDir volumes written to a directory per pod and the mount paths in its
arguments and environment pointed there; hostPath volumes are the host's own paths already.
What a pod would reach through the cluster network is pointed at the host instead
(``HOST_OVERRIDES``): the driver's address (a Service name, no cluster DNS on the host) and the
API server (``kubernetes.default.svc``).  The driver logs in with the kubeconfig it is given, as
a pod would with its service account's token.  The exit status is reported back as the pod's
status (``sparkopkit.finish_driver``), as the kubelet would.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sparkopkit
from k8s_testbed_support import K8sCluster

SPARK_PROPERTIES = "spark.properties"


@dataclass
class HostContainer:
    """A pod's container running as a host process."""

    pod: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def materialize_volumes(k8s: K8sCluster, namespace: str, pod: dict[str, Any], root: Path) -> dict[str, str]:
    """mount path -> host directory for the container's config-map and emptyDir volumes."""
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mapping: dict[str, str] = {}
    for mount in pod["spec"]["containers"][0].get("volumeMounts", []):
        volume = volumes[mount["name"]]
        local = root / mount["name"]
        if "configMap" in volume:
            data = k8s.get_json("configmap", volume["configMap"]["name"], "-n", namespace)["data"]
            items = volume["configMap"].get("items") or [{"key": key, "path": key} for key in data]
            local.mkdir(parents=True, exist_ok=True)
            for item in items:
                (local / item["path"]).write_text(data[item["key"]])
        elif "emptyDir" in volume:
            local.mkdir(parents=True, exist_ok=True)
        else:  # hostPath: the same path on the host; the service-account token: KUBECONFIG instead
            continue
        mapping[mount["mountPath"]] = str(local)
    return mapping


def _translate(value: str, mapping: dict[str, str]) -> str:
    for mount_path, local in mapping.items():
        if value == mount_path or value.startswith(mount_path + "/"):
            return local + value[len(mount_path) :]
    return value


def container_env(pod: dict[str, Any], mapping: dict[str, str]) -> dict[str, str]:
    """The container's environment as its kubelet would set it, with mount paths translated."""
    fields = {"status.podIP": "127.0.0.1", "metadata.name": pod["metadata"]["name"]}
    fields["metadata.namespace"] = pod["metadata"]["namespace"]
    env = {}
    for var in pod["spec"]["containers"][0].get("env", []):
        if "value" in var:
            env[var["name"]] = _translate(var["value"], mapping)
            continue
        path = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if path not in fields:
            raise AssertionError(f"{pod['metadata']['name']}: cannot fill env {var['name']} from {var}")
        env[var["name"]] = fields[path]
    return env


def point_driver_at_host(mapping: dict[str, str], api_server: str) -> None:
    """Append HOST_OVERRIDES to the driver's spark.properties (a later key wins) and translate
    the mount paths in it (the executor pod template file)."""
    conf_dir = next((local for local in mapping.values() if (Path(local) / SPARK_PROPERTIES).is_file()), None)
    if conf_dir is None:
        raise AssertionError(f"no {SPARK_PROPERTIES} among the driver's volumes {mapping}")
    props = Path(conf_dir) / SPARK_PROPERTIES
    lines = []
    for line in props.read_text().splitlines():
        key, sep, value = line.partition("=")
        lines.append(f"{key}{sep}{_translate(value, mapping)}" if sep and not key.startswith("#") else line)
    overrides = {"spark.driver.host": "127.0.0.1", "spark.kubernetes.driver.master": api_server}
    lines += [f"{key}={value}" for key, value in overrides.items()]
    props.write_text("\n".join(lines) + "\n")


@contextlib.contextmanager
def run_container(
    k8s: K8sCluster, namespace: str, pod: dict[str, Any], workdir: Path, kubeconfig: Path
) -> Iterator[HostContainer]:
    """The pod's (only) container as a host process; killed on the way out if still running."""
    name = pod["metadata"]["name"]
    root = workdir / name
    mapping = materialize_volumes(k8s, namespace, pod, root / "volumes")
    if pod["metadata"]["labels"].get("spark-role") == "driver":
        point_driver_at_host(mapping, sparkopkit.api_server(k8s))
    container = pod["spec"]["containers"][0]
    command = [*container["command"], *(_translate(arg, mapping) for arg in container.get("args", []))]
    env = {"PATH": os.environ["PATH"], "HOME": str(root), "KUBECONFIG": str(kubeconfig)}
    env.update(container_env(pod, mapping))
    log = root / "container.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT)
    running = HostContainer(name, proc, log)
    try:
        yield running
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
