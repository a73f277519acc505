"""kubeflow's spark-operator (v2.3.0, built by `scripts/k8s-testbed build`) takes orbitmq's
SparkApplications through its real controller on the kwok test bed: the controller runs
PySpark's ``spark-submit``, which creates the driver pod; kwok plays the driver's kubelet.

What the shipped manifests (spark-jobs/manifests: one SparkApplication per job, the data PVC,
the extra Role, the kustomization) rely on: the kustomization renders and validates; each
application's driver pod gets the manifest's image, main file and arguments, resources, service
account, labels and data volume; the application's state follows the driver
(RUNNING, a failed driver rerun under ``restartPolicy: OnFailure``, COMPLETED); the CRD's
schema refuses a malformed application; and upstream's chart RBAC alone cannot submit with
Spark 4 (the extra Role the kit adds, see ``sparkopkit.SUBMIT_EXTRA_RULES``).

Where a driver only has to end, its end is reported the way a kubelet does
(``sparkopkit.finish_driver``: the pod's status), as kwok does for the pods of Jobs.  One test
runs Spark for real: sparkhost runs the driver's and the executor's containers (as their pod
specs say, through Spark's entrypoint spark-jobs/docker/entrypoint.sh, the one the orbitmq-spark
image has) as host processes and reports the driver's real exit status.  The orbitmq-spark image
itself (the Dockerfile's ``spark`` stage) runs the shipped lag report in containers on the real
node (test_spark_real_pods.py); here the Dockerfile is only checked to put the jobs and the
entrypoint where the manifests expect them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import sparkhost
import sparkopkit
import yaml
from k8s_testbed_support import E2E_TIMEOUT, CommandError, K8sCluster

pytestmark = [pytest.mark.e2e, E2E_TIMEOUT]

SHIPPED = sparkopkit.shipped_apps()
LAG_REPORT = sparkopkit.MANIFESTS / "lag-report.yaml"
APP = "orbitmq-lag-report"
DATA_PVC = sparkopkit.MANIFESTS / "data-pvc.yaml"
JOBS = sparkopkit.MANIFESTS.parent / "jobs"
IMAGE_JOBS = PurePosixPath("/opt/orbitmq/spark-jobs/jobs")  # where the orbitmq-spark image has them
DOCKERFILE = sparkopkit.SPARK_JOBS.parent / "Dockerfile"
# Spark's memory overhead for non-JVM (PySpark) pods: max(384 MiB, 0.4 x heap).
MIN_OVERHEAD_MIB, OVERHEAD_FACTOR = 384, 0.4
UNITS_MIB = {"m": 1, "g": 1024}


def pod_memory(heap: str) -> str:
    """The memory a PySpark driver or executor pod requests for ``heap`` (``512m``, ``2g``)."""
    unit = heap[-1].lower()
    if unit not in UNITS_MIB or not heap[:-1].isdigit():
        raise ValueError(f"memory {heap!r}: expected a whole number of m or g")
    mib = int(heap[:-1]) * UNITS_MIB[unit]
    return f"{mib + max(MIN_OVERHEAD_MIB, int(mib * OVERHEAD_FACTOR))}Mi"


def main_file(path: Path) -> str:
    return str(sparkopkit.manifest_docs(path)[0]["spec"]["mainApplicationFile"])


def shipped_app(path: Path, operator: sparkopkit.SparkOperator, **spec: Any) -> dict[str, Any]:
    """A shipped manifest in the operator's namespace, its driver under the chart's spark
    account (the kit's release name, not the manifest's ``spark-operator``), both pods let onto
    kwok's tainted node by templates merged into the manifest's own (no webhook)."""
    app = sparkopkit.load_app(path, operator.namespace, **spec)
    app["spec"]["driver"]["serviceAccount"] = operator.spark_account
    return sparkopkit.add_templates(app, sparkopkit.kwok_templates())


@pytest.fixture
def data_volume(k8s_cluster: K8sCluster, namespace: str) -> Iterator[str]:
    """The shipped data PVC in ``namespace``, bound to a PersistentVolume made for it (the test
    bed has no provisioner; kwok mounts nothing, so the path is never used)."""
    claim = sparkopkit.manifest_docs(DATA_PVC)[0]
    name = f"{namespace}-{claim['metadata']['name']}"
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": claim["spec"]["resources"]["requests"],
            "accessModes": claim["spec"]["accessModes"],
            "hostPath": {"path": f"/var/lib/{namespace}"},
            "claimRef": {"namespace": namespace, "name": claim["metadata"]["name"]},
        },
    }
    k8s_cluster.apply(volume)
    k8s_cluster.apply(claim, namespace=namespace)
    yield claim["metadata"]["name"]
    k8s_cluster.kubectl("delete", "persistentvolume", name, "--wait=false", check=False)


def check_driver_pod(pod: dict[str, Any], app: dict[str, Any], manifest: dict[str, Any]) -> None:
    """The driver pod carries what the manifest asked for and the controller's labels."""
    spec = manifest["spec"]
    container = pod["spec"]["containers"][0]
    assert container["name"] == sparkopkit.DRIVER_CONTAINER
    assert container["image"] == spec["image"]
    assert container["imagePullPolicy"] == spec["imagePullPolicy"]
    # Spark's driver entrypoint, then the application and its arguments, in order.
    assert container["args"][0] == "driver"
    tail = container["args"][container["args"].index(spec["mainApplicationFile"]) :]
    assert tail == [spec["mainApplicationFile"], *spec["arguments"]]
    assert "org.apache.spark.deploy.PythonRunner" in container["args"]
    memory = pod_memory(spec["driver"]["memory"])
    cores = str(spec["driver"]["cores"])
    assert container["resources"]["requests"] == {"cpu": cores, "memory": memory}
    assert container["resources"]["limits"] == {"cpu": spec["driver"]["coreLimit"], "memory": memory}
    assert pod["spec"]["serviceAccountName"] == spec["driver"]["serviceAccount"]
    assert pod["spec"]["restartPolicy"] == "Never"  # reruns are the controller's, never the kubelet's
    assert sparkopkit.KWOK_TOLERATION in pod["spec"]["tolerations"]  # from driver.template
    # The manifest's own template: its volumes (the data PVC) and their mounts.
    template = spec["driver"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for volume in template.get("volumes", []):
        assert volumes[volume["name"]] == volume
    wanted_mounts = next(c for c in template["containers"] if c["name"] == sparkopkit.DRIVER_CONTAINER).get(
        "volumeMounts", []
    )
    for mount in wanted_mounts:
        assert mount in container["volumeMounts"]
    labels = pod["metadata"]["labels"]
    assert labels.items() >= spec["driver"]["labels"].items()
    assert (
        labels.items()
        >= {
            "spark-role": "driver",
            "sparkoperator.k8s.io/app-name": manifest["metadata"]["name"],
            "sparkoperator.k8s.io/launched-by-spark-operator": "true",
            "sparkoperator.k8s.io/submission-id": app["status"]["submissionID"],
            "spark-app-selector": app["status"]["sparkApplicationId"],
            "spark-version": spec["sparkVersion"],
        }.items()
    )


def kustomizations() -> list[Path]:
    return sorted(p.parent for p in sparkopkit.MANIFESTS.rglob("kustomization.yaml"))


def test_the_shipped_manifests_are_one_per_job() -> None:
    """Each job under spark-jobs/jobs has its SparkApplication and nothing else is shipped as
    one; each kustomization lists every manifest file beside it, and every manifest is in one."""
    jobs = sorted(p.name for p in JOBS.glob("*.py"))
    mains = sorted(PurePosixPath(main_file(path)).name for path in SHIPPED)
    assert jobs == mains
    listed = set()
    for directory in kustomizations():
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        files = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml", "kustomizeconfig.yaml"}
        assert set(kustomization["resources"]) == files, directory
        listed |= {directory / name for name in files}
    assert set(SHIPPED) <= listed


def dockerfile_stage(name: str) -> list[str]:
    """The instructions of the repository Dockerfile's stage ``name`` (continuations joined)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    start = next(
        i for i, line in enumerate(lines) if line.upper().startswith("FROM ") and line.endswith(f" AS {name}")
    )
    end = next((i for i in range(start + 1, len(lines)) if lines[i].upper().startswith("FROM ")), len(lines))
    return lines[start + 1 : end]


def test_the_spark_image_has_what_the_manifests_name() -> None:
    """The Dockerfile's ``spark`` stage (the image test_spark_real_pods.py runs the lag report
    in) copies the jobs to the directory every manifest's mainApplicationFile is in, has Spark's
    entrypoint as its own and runs as uid 10001; each kustomization names that image as
    ``docker build --target spark -t orbitmq-spark:<tag>`` tags it."""
    stage = dockerfile_stage("spark")
    assert f"COPY spark-jobs/jobs {IMAGE_JOBS}" in stage
    assert "COPY spark-jobs/docker/entrypoint.sh /opt/entrypoint.sh" in stage
    assert 'ENTRYPOINT ["/opt/entrypoint.sh"]' in stage and "USER 10001" in stage
    assert {main_file(path).rsplit("/", 1)[0] for path in SHIPPED} == {f"local://{IMAGE_JOBS}"}
    for directory in kustomizations():
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert [image["newName"] for image in kustomization["images"]] == ["docker.io/library/orbitmq-spark"]
    assert {sparkopkit.manifest_docs(path)[0]["spec"]["image"] for path in SHIPPED} == {"orbitmq-spark"}


# Run by each job's own parse_args (argparse: exit status 2 and the option named on bad input).
PARSE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("shipped_job", sys.argv[1])
job = sys.modules["shipped_job"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(job)
print(json.dumps(sorted(vars(job.parse_args(json.loads(sys.argv[2]))))))
"""


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_arguments_are_what_the_job_accepts(path: Path) -> None:
    """The manifest's arguments pass its job's own argument parsing (the job's file is the one
    the image holds at mainApplicationFile: /opt/orbitmq/spark-jobs/jobs/<job>)."""
    app = sparkopkit.manifest_docs(path)[0]
    main = PurePosixPath(main_file(path))
    assert app["spec"]["mainApplicationFile"] == f"local://{IMAGE_JOBS / main.name}"
    # As spark-submit runs a job: its directory first on sys.path (a job may import a sibling).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(JOBS), str(JOBS.parent)])}
    parsed = subprocess.run(
        [sys.executable, "-c", PARSE, str(JOBS / main.name), json.dumps(app["spec"]["arguments"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert parsed.returncode == 0, parsed.stderr
    assert "namesrv" in json.loads(parsed.stdout)
    refused = subprocess.run(
        [
            sys.executable,
            "-c",
            PARSE,
            str(JOBS / main.name),
            json.dumps([*app["spec"]["arguments"], "--bogus"]),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2 and "--bogus" in refused.stderr, refused.stderr


def test_kustomizations_set_namespace_and_image_and_apply(k8s_cluster: K8sCluster, namespace: str) -> None:
    """``kubectl kustomize`` of spark-jobs/manifests (the RBAC, the data PVC, the lag report and
    the archive) and of its backlog-redistribution/ (apart: it moves offsets, applied only when
    needed): every object in the kustomization's namespace, the SparkApplications' image from
    its ``images`` (a field kustomize only rewrites through kustomizeconfig.yaml), the extra
    Role's subject still the chart's controller in its own namespace; the renderings (moved to a
    test namespace) pass the API server's validation."""
    rendered: dict[str, list[dict[str, Any]]] = {}
    for directory in kustomizations():
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        override = kustomization["images"][0]
        out = k8s_cluster.kubectl("kustomize", str(directory)).stdout
        docs = rendered[directory.name] = [doc for doc in yaml.safe_load_all(out) if doc]
        assert {doc["metadata"]["namespace"] for doc in docs} == {kustomization["namespace"]}
        for app in (doc for doc in docs if doc["kind"] == "SparkApplication"):
            assert app["spec"]["image"] == f"{override['newName']}:{override['newTag']}"
            namesrv = app["spec"]["arguments"][app["spec"]["arguments"].index("--namesrv") + 1]
            assert namesrv == f"orbitmq-namesrv.{kustomization['namespace']}.svc:9876"
    kinds = {
        name: sorted((d["kind"], d["metadata"]["name"]) for d in docs) for name, docs in rendered.items()
    }
    assert kinds == {
        "manifests": [
            ("PersistentVolumeClaim", "orbitmq-spark-data"),
            ("Role", "orbitmq-spark-submit"),
            ("RoleBinding", "orbitmq-spark-submit"),
            ("SparkApplication", "orbitmq-archive"),
            ("SparkApplication", "orbitmq-lag-report"),
        ],
        "backlog-redistribution": [("SparkApplication", "orbitmq-backlog-redistribution")],
        "stream-copy": [("SparkApplication", "orbitmq-stream-copy")],
    }
    binding = next(doc for doc in rendered["manifests"] if doc["kind"] == "RoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "spark-operator-controller", "namespace": "spark-operator"}
    ]
    sparkopkit.install_crds(k8s_cluster)
    docs = [doc for docs in rendered.values() for doc in docs]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    applied = k8s_cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=listing).stdout
    assert applied.count("(server dry run)") == len(docs), applied


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_application_reaches_its_driver_pod_and_reruns(
    k8s_cluster: K8sCluster, namespace: str, data_volume: str, tmp_path: Path, path: Path
) -> None:
    """Applied -> driver pod as specified, RUNNING; the driver fails -> rerun with a new
    submission; the second driver succeeds -> COMPLETED after two attempts (``OnFailure``: the
    batch jobs), or started a third time (``Always``: the stream copy, a query that runs until
    deleted)."""
    with sparkopkit.running_spark_operator(k8s_cluster, namespace, tmp_path) as operator:
        # The shipped retry interval (30 s) shortened: the rerun is the controller's either way.
        manifest = shipped_app(path, operator, restartPolicy={"onFailureRetryInterval": 5})
        name = manifest["metadata"]["name"]
        policy = manifest["spec"]["restartPolicy"]["type"]
        assert policy == ("Always" if "stream" in name else "OnFailure")
        k8s_cluster.apply(manifest)
        app = sparkopkit.wait_state(k8s_cluster, operator, name, ("RUNNING",))
        first = sparkopkit.driver_pod(k8s_cluster, namespace, app)
        check_driver_pod(first, app, manifest)
        assert (app["status"]["submissionAttempts"], app["status"]["executionAttempts"]) == (1, 1)
        printed = k8s_cluster.kubectl("get", f"sparkapplications.{sparkopkit.GROUP}", name, "-n", namespace)
        assert "RUNNING" in printed.stdout  # the CRD's Status column

        sparkopkit.finish_driver(k8s_cluster, namespace, first, exit_code=1)

        def attempts_running(attempts: int) -> bool:
            current = sparkopkit.get_app(k8s_cluster, namespace, name)
            status = current["status"]
            return status.get("executionAttempts") == attempts and sparkopkit.app_state(current) == "RUNNING"

        k8s_cluster.wait_for(
            f"{name} rerun after the failed driver", lambda: attempts_running(2), timeout=120
        )
        app = sparkopkit.get_app(k8s_cluster, namespace, name)
        second = sparkopkit.driver_pod(k8s_cluster, namespace, app)
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        assert (
            app["status"]["submissionID"] != first["metadata"]["labels"]["sparkoperator.k8s.io/submission-id"]
        )
        check_driver_pod(second, app, manifest)

        sparkopkit.finish_driver(k8s_cluster, namespace, second, exit_code=0)
        if policy == "Always":
            k8s_cluster.wait_for(f"{name} started again after its driver ended", lambda: attempts_running(3))
            third = sparkopkit.driver_pod(
                k8s_cluster, namespace, sparkopkit.get_app(k8s_cluster, namespace, name)
            )
            assert third["metadata"]["uid"] != second["metadata"]["uid"]
        else:
            done = sparkopkit.wait_state(k8s_cluster, operator, name, ("COMPLETED",))
            assert done["status"]["executionAttempts"] == 2
            assert done["status"]["terminationTime"]
        events = k8s_cluster.get_json(
            "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
        )
        reasons = {e["reason"] for e in events["items"]}
        expected = {
            "SparkDriverRunning",
            "SparkDriverFailed",
            "SparkApplicationPendingRerun",
            "SparkDriverCompleted",
        }
        assert expected <= reasons, sorted(reasons)


def test_malformed_spark_application_refused_by_the_crd(k8s_cluster: K8sCluster, namespace: str) -> None:
    """The CRD's schema refuses what the controller could not run, naming each field."""
    sparkopkit.install_crds(k8s_cluster)
    app = sparkopkit.load_app(LAG_REPORT, namespace)
    spec = app["spec"]
    spec["type"] = "Pyhton"
    spec["mode"] = "detached"
    spec["executor"]["instances"] = 0
    spec["driver"]["cores"] = 0
    spec["restartPolicy"]["type"] = "Sometimes"
    del spec["mainApplicationFile"]
    # --validate=false: kubectl's own schema check off, so the refusal is the API server's.
    with pytest.raises(CommandError) as refused:
        k8s_cluster.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(app))
    message = refused.value.stderr
    for needle in (
        'spec.type: Unsupported value: "Pyhton"',
        'spec.mode: Unsupported value: "detached"',
        "spec.executor.instances: Invalid value: 0",
        "spec.driver.cores: Invalid value: 0",
        'spec.restartPolicy.type: Unsupported value: "Sometimes"',
        "spec.mainApplicationFile: Required value",
    ):
        assert needle in message, f"{needle!r} not in:\n{message}"
    listed = k8s_cluster.get_json(f"sparkapplications.{sparkopkit.GROUP}", "-n", namespace)
    assert listed["items"] == []


def test_chart_rbac_alone_cannot_submit_with_spark_4(
    k8s_cluster: K8sCluster, namespace: str, data_volume: str, tmp_path: Path
) -> None:
    """Upstream's v2.3.0 chart lets the controller make pods, services and config maps, but
    Spark 4's spark-submit also applies a NetworkPolicy: with the chart's RBAC alone the
    submission is refused, which is why the kit (and a cluster install) adds SUBMIT_EXTRA_RULES.
    When this starts passing submissions, the chart has caught up and the extra Role can go."""
    with sparkopkit.running_spark_operator(k8s_cluster, namespace, tmp_path, extra_rbac=False) as operator:
        k8s_cluster.apply(shipped_app(LAG_REPORT, operator, restartPolicy={"type": "Never"}))
        app = sparkopkit.wait_state(k8s_cluster, operator, APP, ("SUBMISSION_FAILED", "FAILED"))
        error = app["status"]["applicationState"].get("errorMessage", "")
        assert "networkpolicies" in error and "forbidden" in error, json.dumps(app["status"], indent=1)
        # spark-submit deletes the driver pod it made before the refusal.
        k8s_cluster.wait_for(
            "no driver pod left",
            lambda: not k8s_cluster.get_json("pods", "-n", namespace, "-l", "spark-role=driver")["items"],
        )


def test_driver_entrypoint_runs_a_pyspark_app_and_passes_on_its_exit(tmp_path: Path) -> None:
    """The entrypoint's driver branch, as a driver pod runs it (``driver`` + what
    spark-submit put in the pod's args), here with a local master: the app's output and exit
    status are the process's, which the kubelet reports as the driver's end."""
    home = sparkopkit.spark_home()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "JAVA_HOME": str(sparkopkit.java_home()),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1",
        "HOME": str(tmp_path),
    }
    job = sparkopkit.SPARKAPPS / "count_job.py"
    args = ["--master", "local[1]", "--conf", "spark.ui.enabled=false"]
    args += ["--class", "org.apache.spark.deploy.PythonRunner", f"local://{job}"]
    run = subprocess.run(
        ["bash", str(sparkopkit.ENTRYPOINT), "driver", *args, "--rows", "42", "--exit-code", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 3, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"counted": 42, "master": "local[1]"}
    bad = subprocess.run(
        ["bash", str(sparkopkit.ENTRYPOINT), "launcher"], env=env, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 64
    assert "unknown role 'launcher' (expected driver or executor)" in bad.stderr


def test_host_runtime_templates_reach_the_driver_and_executor_specs(
    k8s_cluster: K8sCluster, namespace: str, tmp_path: Path
) -> None:
    """What a real-node run relies on, checked on kwok: the templates' command (the entrypoint),
    environment and host mounts end up in the driver pod, and in the executor template the
    driver will create its executors from."""
    host_mounts = [str(sparkopkit.SPARKAPPS.parents[2])]  # the repository (with .venv), as the real node's
    templates = sparkopkit.host_runtime_templates(
        host_mounts, sys.executable, tolerations=[sparkopkit.KWOK_TOLERATION]
    )
    with sparkopkit.running_spark_operator(k8s_cluster, namespace, tmp_path) as operator:
        app = sparkopkit.count_job_app(
            namespace, "count", "host-python:e2e", templates, operator.spark_account
        )
        k8s_cluster.apply(app)
        found = sparkopkit.wait_state(k8s_cluster, operator, "count", ("RUNNING",))
        pod = sparkopkit.driver_pod(k8s_cluster, namespace, found)
        wanted = templates["driver"]["spec"]
        container = pod["spec"]["containers"][0]
        assert container["command"] == ["/bin/bash", str(sparkopkit.ENTRYPOINT)]
        assert container["args"][-4:] == ["--rows", "1000", "--exit-code", "0"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env.items() >= {e["name"]: e["value"] for e in wanted["containers"][0]["env"]}.items()
        assert container["resources"]["requests"]["cpu"] == "200m"
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        for volume in wanted["volumes"]:
            path = volume["hostPath"]["path"]
            assert mounts[path]["readOnly"] is True
            assert volumes[mounts[path]["name"]]["hostPath"]["path"] == path
        # The executor template travels to the driver in a ConfigMap mounted as pod-template-volume.
        config_map = volumes["pod-template-volume"]["configMap"]["name"]
        data = k8s_cluster.get_json("configmap", config_map, "-n", namespace)["data"]
        executor = yaml.safe_load(next(iter(data.values())))
        executor_container = executor["spec"]["containers"][0]
        assert executor_container["name"] == sparkopkit.EXECUTOR_CONTAINER
        assert executor_container["command"] == ["/bin/bash", str(sparkopkit.ENTRYPOINT)]
        assert executor["spec"]["volumes"] == templates["executor"]["spec"]["volumes"]


def test_count_job_runs_for_real_and_completes(
    k8s_cluster: K8sCluster, namespace: str, tmp_path: Path
) -> None:
    """The whole path with Spark really running: the controller submits, the driver pod's
    container runs (on the host: sparkhost plays the kubelet) and asks the API server for an
    executor pod, whose container runs and does the counting; the driver exits 0 and the
    application is COMPLETED; the driver has deleted its executor pod."""
    repo = str(sparkopkit.SPARKAPPS.parents[2])
    templates = sparkopkit.host_runtime_templates(
        [repo], sys.executable, tolerations=[sparkopkit.KWOK_TOLERATION]
    )
    with sparkopkit.running_spark_operator(k8s_cluster, namespace, tmp_path / "operator") as operator:
        app = sparkopkit.count_job_app(
            namespace, "count", "host-python:e2e", templates, operator.spark_account
        )
        k8s_cluster.apply(app)
        found = sparkopkit.wait_state(k8s_cluster, operator, "count", ("RUNNING",))
        driver_pod = sparkopkit.driver_pod(k8s_cluster, namespace, found)
        # The driver's identity: the chart's spark account (executor pods, their config maps).
        kubeconfig = sparkopkit.token_kubeconfig(
            k8s_cluster, namespace, operator.spark_account, tmp_path / "spark.kubeconfig"
        )

        def executor_pods() -> list[dict[str, Any]]:
            selector = "spark-role=executor,sparkoperator.k8s.io/app-name=count"
            return k8s_cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]

        with sparkhost.run_container(k8s_cluster, namespace, driver_pod, tmp_path, kubeconfig) as driver:
            k8s_cluster.wait_for(
                "the driver's executor pod", lambda: bool(executor_pods()) or driver.proc.poll() is not None
            )
            assert driver.proc.poll() is None, driver.output()[-5000:]
            executor_pod = executor_pods()[0]
            with sparkhost.run_container(
                k8s_cluster, namespace, executor_pod, tmp_path, kubeconfig
            ) as executor:
                exit_code = driver.proc.wait(timeout=180)
                assert exit_code == 0, driver.output()[-5000:]
                executor.proc.wait(timeout=60)
        summary = [line for line in driver.output().splitlines() if line.startswith('{"counted"')]
        assert [json.loads(line) for line in summary] == [
            {"counted": 1000, "master": f"k8s://{sparkopkit.api_server(k8s_cluster)}"}
        ]
        assert "Finished task" in executor.output()  # the executor, not the driver, counted
        sparkopkit.finish_driver(k8s_cluster, namespace, driver_pod, exit_code)
        done = sparkopkit.wait_state(k8s_cluster, operator, "count", ("COMPLETED",))
        assert done["status"]["executionAttempts"] == 1
        k8s_cluster.wait_for("the executor pod deleted by the driver", lambda: not executor_pods())
