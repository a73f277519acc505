"""kubeflow's spark-operator on the test bed: its CRDs, the RBAC of its own chart, and its
controller run as a local process, so SparkApplications are taken through the real controller.

What ``scripts/k8s-testbed build`` puts in the cache for it (side module ``spark-operator``):
``bin/spark-operator``, ``share/spark-operator-crds/`` and ``share/spark-operator-chart/``.

The controller runs outside the cluster, as the chart's controller service account would in
it: the ServiceAccounts, Roles and bindings are rendered from upstream's chart (``helm
template``: the RBAC a cluster install gets, so a rule the chart lacks fails here too) and the
controller logs in with a token of that account.  A token, not the test bed's admin
certificate: the controller's ``spark-submit`` builds the driver pod with Spark's Kubernetes
client (fabric8), which cannot read the test bed's EC client key.  The webhook is not run
(``webhook.enable=false``): without it whatever the webhook would patch into the pods
(tolerations, volumes, affinity) goes into ``driver.template`` / ``executor.template``, whose
containers Spark matches by name (``spark-kubernetes-driver`` / ``spark-kubernetes-executor``).

``spark-submit`` comes from PySpark's pip package (``SPARK_HOME``: it ships the Kubernetes
resource manager) and needs a Java runtime; the master URL the controller passes it is
``k8s://https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``.

The kit knows no node: a test places the pods with :func:`pod_template` (kwok's taint on the
fake node; on the real node, its labels) and :func:`host_runtime_templates` gives the pods a
Spark runtime from the host's files (PySpark, the JDK, spark-jobs/docker/entrypoint.sh: the
one the orbitmq-spark image has as /opt/entrypoint.sh), so one controller serves the fake-node
tests and a run whose containers sparkhost starts on the host; on the real node the pods run
the orbitmq-spark image itself (test_spark_real_pods.py).  The driver inside a pod reaches the API
server at ``spark.kubernetes.driver.master`` (default ``https://kubernetes.default.svc``), not
at the controller's 127.0.0.1 master URL.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from k8s_testbed_support import K8sCluster

GROUP = "sparkoperator.k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
CRD_PLURALS = ("sparkapplications", "scheduledsparkapplications", "sparkconnects")
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
# The container Spark fills in, by role (driver.template / executor.template).
CONTAINERS = {"driver": DRIVER_CONTAINER, "executor": EXECUTOR_CONTAINER}
# Templates of upstream's chart the controller needs when the webhook is off.
CHART_TEMPLATES = (
    "templates/controller/serviceaccount.yaml",
    "templates/controller/rbac.yaml",
    "templates/spark/serviceaccount.yaml",
    "templates/spark/rbac.yaml",
)
# The SparkApplication states the controller reports (v1beta2.ApplicationStateType).
TERMINAL_STATES = ("COMPLETED", "FAILED", "SUBMISSION_FAILED")
SPARKAPPS = Path(__file__).parent / "sparkapps"
SPARK_JOBS = Path(__file__).resolve().parents[2] / "spark-jobs"
# Spark's container entrypoint: the orbitmq-spark image's /opt/entrypoint.sh, the same file.
ENTRYPOINT = SPARK_JOBS / "docker" / "entrypoint.sh"
# What orbitmq ships: a SparkApplication per job, the data PVC, the extra Role, the kustomization.
MANIFESTS = SPARK_JOBS / "manifests"
SUBMIT_RBAC = MANIFESTS / "spark-submit-rbac.yaml"


def manifest_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def shipped_apps() -> list[Path]:
    """The shipped SparkApplication manifests (one per job, some in their own kustomization)."""
    return sorted(
        path
        for path in MANIFESTS.rglob("*.yaml")
        if any(doc.get("kind") == "SparkApplication" for doc in manifest_docs(path))
    )


def _submit_extra_rules() -> list[dict[str, Any]]:
    """The rules of the shipped Role (spark-jobs/manifests/spark-submit-rbac.yaml), so the Role a
    cluster install applies is the one the tests run the controller with."""
    role = next(doc for doc in manifest_docs(SUBMIT_RBAC) if doc["kind"] == "Role")
    return list(role["rules"])


# Spark 4.3's spark-submit also applies a NetworkPolicy for the driver pod (its
# NetworkPolicyFeatureStep, server-side apply), which the v2.3.0 chart's controller role does
# not allow: a cluster install needs this Role beside the chart's.
SUBMIT_EXTRA_RULES = _submit_extra_rules()
TOKEN_DURATION = "2h"
# JVM options for short Spark processes on a small machine: C1 JIT only, serial GC.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
READY_TIMEOUT_S = 60
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


class SparkKitError(AssertionError):
    """The kit cannot run the spark-operator here; says what is missing and how to get it."""


def share_dir(k8s: K8sCluster) -> Path:
    """The cache's share/ (beside bin/): the CRDs and the chart copied from the module."""
    return k8s.bin_dir.parent / "share"


def spark_home() -> Path:
    """Where ``bin/spark-submit`` is: ``$ORBITMQ_SPARK_HOME``, else PySpark's package directory.

    pip's pyspark is a complete Spark distribution (jars, bin/, the Kubernetes resource
    manager), so the test venv's ``orbitmq[spark]`` extra is all a test needs besides Java.
    """
    override = os.environ.get("ORBITMQ_SPARK_HOME")
    if override:
        home = Path(override)
    else:
        try:
            import pyspark
        except ImportError as exc:
            raise SparkKitError(
                "the spark-operator tests need PySpark for spark-submit: install the 'spark' extra "
                "into the test venv, or set ORBITMQ_SPARK_HOME to a Spark distribution"
            ) from exc
        home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-submit").is_file():
        raise SparkKitError(f"SPARK_HOME {home} has no bin/spark-submit")
    java_home()  # fails early without a JDK
    return home


def install_crds(k8s: K8sCluster) -> None:
    """The module's CRDs, established and served before the controller's informers start.

    Server-side apply: the SparkApplication CRD (~800 kB) is larger than the annotation a
    client-side apply would store it in.
    """
    crds = share_dir(k8s) / "spark-operator-crds"
    k8s.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    for plural in CRD_PLURALS:
        crd = f"{plural}.{GROUP}"

        def served(crd: str = crd) -> bool:
            found = k8s.kubectl("get", "crd", crd, "-o", "json", check=False)
            status = json.loads(found.stdout).get("status") if found.returncode == 0 else None
            conditions = (status or {}).get("conditions") or []  # none yet right after the apply
            established = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
            return established and k8s.kubectl("get", crd, "-A", check=False).returncode == 0

        k8s.wait_for(f"CRD {crd} established and served", served)


def render_rbac(k8s: K8sCluster, release: str, namespace: str) -> list[dict[str, Any]]:
    """The service accounts, roles and bindings upstream's chart makes for a controller that
    runs the jobs of ``namespace`` (and lives there), with the webhook turned off."""
    chart = share_dir(k8s) / "spark-operator-chart"
    args = ["template", release, str(chart), "--namespace", namespace]
    args += ["--set", f"spark.jobNamespaces={{{namespace}}}", "--set", "webhook.enable=false"]
    for template in CHART_TEMPLATES:
        args += ["--show-only", template]
    rendered = k8s.helm(*args).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def submit_extra_rbac(release: str, namespace: str, account: str) -> list[dict[str, Any]]:
    """The Role (and its binding) of SUBMIT_EXTRA_RULES for the controller's account."""
    name = f"{release}-spark-submit"
    meta = {"name": name, "namespace": namespace}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": SUBMIT_EXTRA_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        },
    ]


def api_server(k8s: K8sCluster) -> str:
    """The API server's URL as the test bed's kubeconfig names it (https://127.0.0.1:PORT)."""
    return str(yaml.safe_load(k8s.kubeconfig.read_text())["clusters"][0]["cluster"]["server"])


def token_kubeconfig(k8s: K8sCluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that logs in as ``namespace/account`` with a bound token (TokenRequest)."""
    token = k8s.kubectl(
        "create", "token", account, "-n", namespace, f"--duration={TOKEN_DURATION}"
    ).stdout.strip()
    admin = yaml.safe_load(k8s.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testbed", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [
            {"name": account, "context": {"cluster": "testbed", "user": account, "namespace": namespace}}
        ],
        "current-context": account,
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class SparkOperator:
    """A running controller: the namespace it manages, its accounts and its log."""

    namespace: str
    release: str
    controller_account: str
    spark_account: str  # the driver's service account (spec.driver.serviceAccount)
    log: Path
    proc: subprocess.Popen[bytes]

    def log_tail(self, chars: int = 20000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until the manager's /readyz answers (its caches have synced); fail with its log."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _answers(f"http://127.0.0.1:{port}/readyz"):
        if proc.poll() is not None:
            why = f"exited with {proc.returncode}"
        elif time.monotonic() > deadline:
            why = f"not ready after {READY_TIMEOUT_S}s"
        else:
            time.sleep(0.5)
            continue
        raise SparkKitError(f"spark-operator {why}:\n{log.read_text(errors='replace')[-5000:]}")


@contextlib.contextmanager
def running_spark_operator(
    k8s: K8sCluster, namespace: str, workdir: Path, extra_rbac: bool = True
) -> Iterator[SparkOperator]:
    """CRDs, the chart's RBAC in ``namespace`` and the controller managing that namespace.

    ``extra_rbac``: also the Role that Spark 4's spark-submit needs beyond the chart's
    (SUBMIT_EXTRA_RULES); False shows what the chart alone gets.

    On the way out the controller gets SIGTERM (SIGKILL after 30 s); its log is printed when
    the block failed.  The cluster-scoped role and binding of the release are deleted; the
    namespaced objects go with the test's namespace.
    """
    home = spark_home()
    install_crds(k8s)
    release = f"spark-operator-{os.urandom(3).hex()}"  # cluster-scoped names stay unique per test
    rbac = render_rbac(k8s, release, namespace)
    accounts = {
        doc["metadata"]["labels"].get("app.kubernetes.io/component", "spark"): doc["metadata"]["name"]
        for doc in rbac
        if doc["kind"] == "ServiceAccount"
    }
    if extra_rbac:
        rbac += submit_extra_rbac(release, namespace, accounts["controller"])
    k8s.apply(*rbac, namespace=namespace)
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = token_kubeconfig(k8s, namespace, accounts["controller"], workdir / "controller.kubeconfig")
    server = urlsplit(api_server(k8s))
    health = free_port()
    env = {
        **k8s.env,
        "KUBECONFIG": str(kubeconfig),
        "SPARK_HOME": str(home),
        # The master URL spark-submit gets: k8s://https://HOST:PORT.
        "KUBERNETES_SERVICE_HOST": str(server.hostname),
        "KUBERNETES_SERVICE_PORT": str(server.port or 443),
        "HOME": str(workdir),
        # spark-submit is a short-lived JVM per submission: C1 only and the serial collector
        # start it faster on the test bed's two shared cores (no effect on what it submits).
        "SPARK_SUBMIT_OPTS": QUICK_JVM,
    }
    args = [
        str(k8s.bin_dir / "spark-operator"),
        "controller",
        "start",
        f"--namespaces={namespace}",
        "--controller-threads=2",
        f"--health-probe-bind-address=127.0.0.1:{health}",
        "--metrics-bind-address=0",
        "--leader-election=false",
        "--zap-log-level=info",
    ]
    log = workdir / "spark-operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    operator = SparkOperator(namespace, release, accounts["controller"], accounts["spark"], log, proc)
    try:
        _wait_ready(proc, health, log)
        yield operator
    except BaseException:
        print(f"--- spark-operator log ({log}) ---\n{operator.log_tail()}")
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for kind in ("clusterrolebinding", "clusterrole"):
            k8s.kubectl("delete", kind, f"{release}-controller", "--ignore-not-found", check=False)


def pod_template(container_name: str, container: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """``driver.template`` / ``executor.template``: pod-spec fields (tolerations, volumes,
    nodeSelector ...) that the webhook would otherwise add, and ``container``'s fields for the
    container Spark fills in (``container_name``: DRIVER_CONTAINER or EXECUTOR_CONTAINER)."""
    return {"spec": {**spec, "containers": [{"name": container_name, **(container or {})}]}}


def _merge_named(base: list[dict[str, Any]], extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``base`` then ``extra``; an ``extra`` entry replaces the ``base`` entry of its name."""
    names = {item.get("name") for item in extra}
    return [item for item in base if item.get("name") not in names] + extra


def merge_template(base: dict[str, Any] | None, extra: dict[str, Any]) -> dict[str, Any]:
    """Two driver (or executor) templates as one: ``extra``'s pod fields added to ``base``'s
    (volumes by name, an ``extra`` volume replacing a ``base`` one of the same name; other lists
    appended; maps merged; other fields replaced), and likewise the fields of the container of
    the same name (env and volumeMounts by name).  How a test adds a node's runtime to a shipped
    manifest's template without losing its volumes."""
    spec = dict((base or {}).get("spec") or {})
    for key, value in extra["spec"].items():
        current = spec.get(key)
        if key == "containers":
            spec[key] = _merge_containers(current or [], value)
        elif key == "volumes":
            spec[key] = _merge_named(current or [], value)
        elif isinstance(current, list):
            spec[key] = current + value
        elif isinstance(current, dict):
            spec[key] = {**current, **value}
        else:
            spec[key] = value
    return {**(base or {}), "spec": spec}


def _merge_containers(base: list[dict[str, Any]], extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged = {c["name"]: dict(c) for c in base}
    for container in extra:
        current = merged.setdefault(container["name"], {})
        for key, value in container.items():
            if key in ("env", "volumeMounts"):
                current[key] = _merge_named(current.get(key, []), value)
            else:
                current[key] = value
    return list(merged.values())


def add_templates(app: dict[str, Any], templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``app`` with ``templates`` (driver/executor, as :func:`kwok_templates` or
    :func:`host_runtime_templates` give) merged into its own driver and executor templates."""
    for role in ("driver", "executor"):
        app["spec"][role]["template"] = merge_template(app["spec"][role].get("template"), templates[role])
    return app


def kwok_templates() -> dict[str, dict[str, Any]]:
    """Driver and executor templates that let the pods onto kwok's tainted fake node."""
    return {
        "driver": pod_template(DRIVER_CONTAINER, tolerations=[KWOK_TOLERATION]),
        "executor": pod_template(EXECUTOR_CONTAINER, tolerations=[KWOK_TOLERATION]),
    }


def java_home() -> Path:
    """The JDK spark-submit uses: ``$JAVA_HOME``, else the one ``java`` on PATH belongs to."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    if not java:
        raise SparkKitError("spark-submit needs a Java runtime (>= 17): none on PATH and no JAVA_HOME")
    return Path(java).resolve().parents[1]


def _outside_links(root: Path) -> set[Path]:
    """Directories outside ``root`` that its symlinks point into (Debian's JDK keeps its
    configuration in /etc/java-17-openjdk and its CA store in /etc/ssl/certs/java)."""
    found = set()
    for path in root.rglob("*"):
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(root) and not target.is_relative_to("/usr"):
                found.add(target.parent)
    return {d for d in found if not any(d != o and d.is_relative_to(o) for o in found)}


def host_runtime_templates(host_mounts: list[str], python: str, **spec: Any) -> dict[str, dict[str, Any]]:
    """Driver and executor templates for pods that run Spark from the host's files, as the test
    bed's real node runs Python (its host-Python image, ``info["real_node"]``): ``host_mounts``
    (the node's, holding /usr and the repository with its venv) read-only at the same paths,
    plus what the JDK links to outside /usr; PySpark's Spark as SPARK_HOME, the host's JDK,
    ``python`` for PySpark, and ENTRYPOINT (the orbitmq-spark image's entrypoint) as the
    command (a host-Python image has none).  ``spec``: more pod-spec fields (nodeSelector,
    tolerations ...).
    """
    home, java = spark_home(), java_home()
    paths = [Path(m) for m in host_mounts]
    for needed in (home, java, ENTRYPOINT, *sorted(_outside_links(java))):
        if not any(needed.is_relative_to(m) for m in paths):
            paths.append(needed if needed.is_dir() else needed.parent)
    volumes = [
        {"name": f"spark-host-{i}", "hostPath": {"path": str(p), "type": "Directory"}}
        for i, p in enumerate(paths)
    ]
    container = {
        "command": ["/bin/bash", str(ENTRYPOINT)],
        "env": [
            {"name": "SPARK_HOME", "value": str(home)},
            {"name": "JAVA_HOME", "value": str(java)},
            {"name": "PYSPARK_PYTHON", "value": python},
            {"name": "PYSPARK_DRIVER_PYTHON", "value": python},
        ],
        "volumeMounts": [
            {"name": v["name"], "mountPath": v["hostPath"]["path"], "readOnly": True} for v in volumes
        ],
    }
    return {
        role: pod_template(name, volumes=volumes, container=container, **spec)
        for role, name in CONTAINERS.items()
    }


def load_app(path: Path, namespace: str, **spec: Any) -> dict[str, Any]:
    """A SparkApplication manifest from a file, put in ``namespace``; ``spec`` entries are
    merged one level deep (``driver={"template": ...}`` keeps the file's other driver fields)."""
    app: dict[str, Any] = yaml.safe_load(path.read_text())
    app["metadata"]["namespace"] = namespace
    for key, value in spec.items():
        current = app["spec"].get(key)
        app["spec"][key] = {**current, **value} if isinstance(current, dict) else value
    return app


def count_job_app(
    namespace: str,
    name: str,
    image: str,
    templates: dict[str, dict[str, Any]],
    service_account: str,
    rows: int = 1000,
    exit_code: int = 0,
) -> dict[str, Any]:
    """A SparkApplication of sparkapps/count_job.py (its host path as a ``local://`` file, so
    pods that mount the repository run it), small enough for the real node: 0.2 CPU requested
    per pod, one executor, no reruns (the state is the driver's exit)."""
    pod = {"cores": 1, "coreRequest": "200m", "memory": "512m"}
    return {
        "apiVersion": API_VERSION,
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "sparkVersion": "4.3.0",
            "image": image,
            "mainApplicationFile": f"local://{SPARKAPPS / 'count_job.py'}",
            "arguments": ["--rows", str(rows), "--exit-code", str(exit_code)],
            "restartPolicy": {"type": "Never"},
            "driver": {**pod, "serviceAccount": service_account, "template": templates["driver"]},
            "executor": {**pod, "instances": 1, "template": templates["executor"]},
        },
    }


def get_app(k8s: K8sCluster, namespace: str, name: str) -> dict[str, Any]:
    return k8s.get_json(f"sparkapplications.{GROUP}", name, "-n", namespace)


def app_state(app: dict[str, Any]) -> str:
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state", ""))


def wait_state(
    k8s: K8sCluster, operator: SparkOperator, name: str, states: tuple[str, ...], timeout: float = 120
) -> dict[str, Any]:
    """The SparkApplication once its state is one of ``states``; fails early (with the
    controller's log) on a terminal state that was not asked for."""
    found: dict[str, Any] = {}

    def reached() -> bool:
        nonlocal found
        found = get_app(k8s, operator.namespace, name)
        state = app_state(found)
        if state in TERMINAL_STATES and state not in states:
            raise AssertionError(
                f"SparkApplication {name} ended {state}, not {' or '.join(states)}: "
                f"{json.dumps(found.get('status'), indent=1)}\n--- controller ---\n{operator.log_tail(5000)}"
            )
        return state in states

    k8s.wait_for(f"SparkApplication {operator.namespace}/{name} in {' or '.join(states)}", reached, timeout)
    return found


def driver_pod(k8s: K8sCluster, namespace: str, app: dict[str, Any]) -> dict[str, Any]:
    """The driver pod the status names."""
    name = app["status"]["driverInfo"]["podName"]
    return k8s.get_json("pod", name, "-n", namespace)


def finish_driver(k8s: K8sCluster, namespace: str, pod: dict[str, Any], exit_code: int) -> None:
    """End a fake-node driver as its kubelet would report it: container terminated with
    ``exit_code``, pod Succeeded or Failed (kwok does the same for pods of Jobs)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    container = pod["spec"]["containers"][0]
    terminated = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": now,
        "finishedAt": now,
    }
    status = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"terminated": terminated},
            }
        ],
    }
    k8s.kubectl(
        "patch",
        "pod",
        pod["metadata"]["name"],
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
