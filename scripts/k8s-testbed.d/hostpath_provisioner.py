#!/usr/bin/env python3
"""The real node's storage: a small hostPath provisioner, so a PVC binds as in a real cluster.

Without it a PersistentVolumeClaim on the test bed stays Pending (there is no cloud disk and no
provisioner), and the chart install of docs/operations/kubernetes.md, which names no storage
class, never gets a broker running. `scripts/k8s-testbed up --real-node` creates the StorageClass
`orbitmq-local-path` (the cluster's default, `WaitForFirstConsumer`, reclaim `Delete`) and runs
this file as a host process with the admin identity, in the manner of rancher's
local-path-provisioner but without its helper pods (this process is root on the node's host, so
it makes the directory itself):

* a Pending PVC of that class whose pod the scheduler has placed (annotation
  `volume.kubernetes.io/selected-node`) gets a directory `<root>/<namespace>-<pvc>-<uid8>`,
  mode 0777 (fsGroup does not apply to hostPath, and orbitmq's pods run as uid 10001), and a
  PersistentVolume `pvc-<uid>` on it, pinned to that node and bound to the claim (claimRef);
  the PV controller completes the binding and the scheduler the pod;
* a PV it made that is Released (its PVC deleted) with reclaim policy `Delete` loses its
  directory and is deleted.

It polls the API every `--interval-s` (1 s): a test bed has few claims, and a poll cannot miss
an event. The decisions are pure (`plan`), the loop does the I/O.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STORAGE_CLASS = "orbitmq-local-path"
PROVISIONER = "orbitmq.local/host-path"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
DIRECTORY_MODE = 0o777
"""Any pod uid may write (as rancher's local-path-provisioner): fsGroup is not applied to hostPath."""

Obj = dict[str, Any]


def storage_class() -> Obj:
    """The test bed's default StorageClass, served by this provisioner."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        # the directory must be on the node the pod runs on: wait until the scheduler picks it
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def directory_for(pvc: Obj, root: Path) -> Path:
    meta = pvc["metadata"]
    return root / f"{meta['namespace']}-{meta['name']}-{meta['uid'][:8]}"


def volume_for(pvc: Obj, root: Path) -> Obj:
    """The PersistentVolume for ``pvc`` on its selected node, bound to it in advance."""
    meta, spec = pvc["metadata"], pvc["spec"]
    node = meta["annotations"][SELECTED_NODE]
    selector = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta['uid']}", "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "storageClassName": STORAGE_CLASS,
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": str(directory_for(pvc, root)), "type": "Directory"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [selector]}]}},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }


@dataclass
class Plan:
    create: list[Obj] = field(default_factory=list)
    """PersistentVolumes to make (their directories first)."""
    delete: list[Obj] = field(default_factory=list)
    """Released PersistentVolumes of ours to delete with their directories."""


def plan(pvcs: list[Obj], pvs: list[Obj], root: Path) -> Plan:
    """What to do, given every PVC and PV of the cluster."""
    out = Plan()
    existing = {pv["metadata"]["name"] for pv in pvs}
    for pvc in pvcs:
        meta, spec = pvc["metadata"], pvc["spec"]
        wanted = (
            spec.get("storageClassName") == STORAGE_CLASS
            and not spec.get("volumeName")
            and (pvc.get("status") or {}).get("phase", "Pending") == "Pending"
            and SELECTED_NODE in (meta.get("annotations") or {})
        )
        if wanted and f"pvc-{meta['uid']}" not in existing:
            out.create.append(volume_for(pvc, root))
    for pv in pvs:
        ours = (pv["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER
        released = (pv.get("status") or {}).get("phase") == "Released"
        if ours and released and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
            out.delete.append(pv)
    return out


class Api:
    """The few API calls it makes (stdlib only, the admin's client certificate)."""

    def __init__(self, server: str, pki: Path) -> None:
        self.server = server
        self.ssl = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ssl.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def call(self, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, context=self.ssl, timeout=10) as reply:
                return reply.status, json.loads(reply.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def items(self, path: str) -> list[Obj]:
        status, body = self.call("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body.get('message', '')}")
        return list(body.get("items") or [])


def step(api: Api, root: Path, log: Any = print) -> Plan:
    """One look at the cluster and what it asked for."""
    todo = plan(api.items("/api/v1/persistentvolumeclaims"), api.items("/api/v1/persistentvolumes"), root)
    for pv in todo.create:
        path = Path(pv["spec"]["hostPath"]["path"])
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(DIRECTORY_MODE)
        status, body = api.call("POST", "/api/v1/persistentvolumes", pv)
        claim = pv["spec"]["claimRef"]
        if status in (200, 201, 409):
            log(f"provisioned {pv['metadata']['name']} at {path} for {claim['namespace']}/{claim['name']}")
        else:
            log(f"creating {pv['metadata']['name']} failed: {status} {body.get('message', '')}")
    for pv in todo.delete:
        path = Path(pv["spec"]["hostPath"]["path"])
        if path.is_relative_to(root):  # never a directory this provisioner did not make
            shutil.rmtree(path, ignore_errors=True)
        status, body = api.call("DELETE", f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
        if status in (200, 202, 404):
            log(f"deleted {pv['metadata']['name']} and {path}")
        else:
            log(f"deleting {pv['metadata']['name']} failed: {status} {body.get('message', '')}")
    return todo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="the API server's URL")
    parser.add_argument("--pki", type=Path, required=True, help="directory with ca.crt, admin.crt, admin.key")
    parser.add_argument("--root", type=Path, required=True, help="where volume directories go")
    parser.add_argument("--interval-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    api = Api(args.server, args.pki)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"hostpath provisioner: class {STORAGE_CLASS}, volumes under {args.root}", flush=True)
    while not stopping:
        try:
            step(api, args.root, log=lambda line: print(line, flush=True))
        except (OSError, RuntimeError, ValueError) as error:  # the API server restarting, ...
            print(f"hostpath provisioner: {error}", flush=True)
        time.sleep(args.interval_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
