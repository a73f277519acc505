"""The test bed's hostPath provisioner (scripts/k8s-testbed.d/hostpath_provisioner.py): which
claims get a volume, what the volume is, and which volumes go. tests/e2e/test_real_node.py
shows it binding a claim without a class on the real node."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "k8s-testbed.d" / "hostpath_provisioner.py"


@pytest.fixture(scope="module")
def hp() -> Any:
    spec = importlib.util.spec_from_file_location("hostpath_provisioner", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def pvc(
    name: str, *, klass: str = "orbitmq-local-path", node: str | None = "real-node-0", **status: Any
) -> dict:
    annotations = {"volume.kubernetes.io/selected-node": node} if node else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "mq",
            "uid": f"{name}-0123456789",
            "annotations": annotations,
        },
        "spec": {
            "storageClassName": klass,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
        "status": {"phase": "Pending", **status},
    }


def test_a_placed_pending_claim_of_the_class_gets_a_volume_on_its_node(hp: Any, tmp_path: Path) -> None:
    todo = hp.plan([pvc("data-mq-broker-0-0")], [], tmp_path)
    [pv] = todo.create
    assert pv["metadata"]["name"] == "pvc-data-mq-broker-0-0-0123456789"
    spec = pv["spec"]
    assert spec["claimRef"]["uid"] == "data-mq-broker-0-0-0123456789"
    assert (spec["claimRef"]["namespace"], spec["claimRef"]["name"]) == ("mq", "data-mq-broker-0-0")
    assert spec["hostPath"]["path"] == str(tmp_path / "mq-data-mq-broker-0-0-data-mq-")
    assert spec["capacity"] == {"storage": "1Gi"} and spec["storageClassName"] == "orbitmq-local-path"
    [term] = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == ["real-node-0"]
    assert todo.delete == []


def test_other_claims_are_left_alone(hp: Any, tmp_path: Path) -> None:
    claims = [
        pvc("other-class", klass="orbitmq-host"),  # the e2e tests' own pre-bound volumes
        pvc("not-placed-yet", node=None),  # WaitForFirstConsumer: no pod scheduled yet
        pvc("bound", phase="Bound"),
    ]
    made = hp.volume_for(pvc("made"), tmp_path)
    assert hp.plan([*claims, pvc("made")], [made], tmp_path).create == [], "made once"


def test_released_volumes_of_ours_are_deleted_others_kept(hp: Any, tmp_path: Path) -> None:
    ours = hp.volume_for(pvc("gone"), tmp_path) | {"status": {"phase": "Released"}}
    bound = hp.volume_for(pvc("used"), tmp_path) | {"status": {"phase": "Bound"}}
    foreign = {
        "metadata": {"name": "hand-made"},
        "spec": {"persistentVolumeReclaimPolicy": "Delete"},
        "status": {"phase": "Released"},
    }
    assert hp.plan([], [ours, bound, foreign], tmp_path).delete == [ours]


def test_the_class_is_the_default_and_waits_for_the_pod(hp: Any) -> None:
    klass = hp.storage_class()
    assert klass["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert (klass["volumeBindingMode"], klass["provisioner"]) == ("WaitForFirstConsumer", hp.PROVISIONER)
