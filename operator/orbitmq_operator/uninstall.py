"""``orbitmq-operator-uninstall``: the chart's ``pre-delete`` hook, which deletes a release's
orbitmq resources while the operator that handles their deletion still runs.

Why a hook: ``helm uninstall`` deletes every object of a release at once. The operator's
topics and consumer groups carry its finalizer (``orbitmq.io/operator``: their deletion first
removes them from the brokers), and the operator's Deployment goes in the same breath, so
without the hook they would wait for an operator that is gone, stuck in ``Terminating`` with
``helm uninstall --wait`` timing out. The hook runs before Helm deletes anything:

1. it deletes the release's clusters, topics and consumer groups (selected by the release's
   labels in its namespace); the garbage collector then removes a cluster's StatefulSets, pods
   and Services (the brokers' volumes follow ``spec.brokers.storage.retention``). Not in the
   foreground: a collector that has not yet noticed the CRDs (it rediscovers them every 30 s)
   would hold the cluster object, and the uninstall, that long for nothing;
2. it waits until none is left: the operator releases a topic or group at once when its
   cluster is being deleted, after removing it from the brokers otherwise;
3. when the operator has not released one within ``--timeout`` (not running: scaled to zero,
   crash-looping), it removes the operator's finalizer itself, saying so, rather than leave
   the uninstall hanging: the brokers holding that topic are being deleted with the release;
4. it deletes the release's ``helm test`` pods: Helm never deletes test hooks, and the chart
   keeps them after a run (no ``hook-succeeded`` policy) so ``helm test --logs`` can read them.

Exit status 0 when nothing of the release's orbitmq resources is left, 1 otherwise (Helm then
reports the hook's failure; ``helm uninstall --no-hooks`` skips it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import click
from lightkube import ApiError, Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, PatchType

from orbitmq_operator.crds import KINDS
from orbitmq_operator.spec import FINALIZER, GROUP, VERSION

RESOURCES = {k.plural: create_namespaced_resource(GROUP, VERSION, k.kind, k.plural) for k in KINDS}
TEST_POD_NAME = "orbitmq-test"
"""``app.kubernetes.io/name`` of the chart's ``helm test`` pod (templates/tests)."""
POLL_S = 1.0
Clock = Callable[[], float]


def release_labels(release: str) -> dict[str, str]:
    """The labels the chart puts on every object of ``release`` (templates/_helpers.tpl)."""
    return {"app.kubernetes.io/instance": release, "app.kubernetes.io/managed-by": "Helm"}


def remaining(client: Client, namespace: str, release: str) -> list[tuple[str, str, list[str]]]:
    """(plural, name, finalizers) of each orbitmq resource of the release still there."""
    out = []
    for plural, resource in RESOURCES.items():
        for obj in client.list(resource, namespace=namespace, labels=release_labels(release)):
            meta = obj.metadata
            out.append((plural, meta.name, list(meta.finalizers or [])))
    return out


def delete_all(client: Client, namespace: str, found: Iterable[tuple[str, str, list[str]]]) -> None:
    for plural, name, _ in found:
        try:
            client.delete(RESOURCES[plural], name, namespace=namespace, cascade=CascadeType.BACKGROUND)
        except ApiError as error:
            if error.status.code != 404:
                raise


def release_finalizer(client: Client, namespace: str, plural: str, name: str, finalizers: list[str]) -> None:
    """Drop the operator's finalizer (a JSON patch guarded by a test of the list, so a change
    made meanwhile by anyone else fails the patch instead of being overwritten)."""
    kept = [f for f in finalizers if f != FINALIZER]
    patch = [
        {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
        {"op": "replace", "path": "/metadata/finalizers", "value": kept},
    ]
    try:
        client.patch(RESOURCES[plural], name, patch, namespace=namespace, patch_type=PatchType.JSON)
    except ApiError as error:
        if error.status.code not in (404, 422):  # gone, or changed meanwhile: the next round sees it
            raise


def delete_test_pods(client: Client, namespace: str, release: str) -> list[str]:
    labels = {"app.kubernetes.io/name": TEST_POD_NAME, "app.kubernetes.io/instance": release}
    names = [pod.metadata.name for pod in client.list(Pod, namespace=namespace, labels=labels)]
    for name in names:
        try:
            client.delete(Pod, name, namespace=namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise
    return names


def uninstall(
    client: Client,
    namespace: str,
    release: str,
    timeout: float,
    echo: Callable[[str], None],
    clock: Clock = time.monotonic,
) -> list[str]:
    """Delete the release's orbitmq resources and wait for them; returns what is left."""
    if tests := delete_test_pods(client, namespace, release):
        echo(f"deleted helm test pods {', '.join(tests)}")
    found = remaining(client, namespace, release)
    if not found:
        echo(f"no orbitmq resources of release {release} in {namespace}")
        return []
    echo(f"deleting {', '.join(f'{p}/{n}' for p, n, _ in found)}")
    delete_all(client, namespace, found)
    started = clock()
    forced = False
    while found := remaining(client, namespace, release):
        waited = clock() - started
        if waited >= timeout and not forced:
            for plural, name, finalizers in found:
                if FINALIZER in finalizers:
                    echo(
                        f"{plural}/{name}: the operator did not release it within {timeout:.0f}s "
                        f"(is it running?); removing its finalizer {FINALIZER}"
                    )
                    release_finalizer(client, namespace, plural, name, finalizers)
            forced = True
        elif waited >= 2 * timeout:
            break
        time.sleep(POLL_S)
    left = [f"{plural}/{name} (finalizers {finalizers})" for plural, name, finalizers in found]
    echo(f"left: {', '.join(left)}" if left else f"every orbitmq resource of release {release} is gone")
    return left


@click.command(context_settings={"show_default": True})
@click.option("-n", "--namespace", required=True, help="The release's namespace.")
@click.option("--release", required=True, help="The Helm release whose resources go.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=120.0,
    help="Seconds to wait for the operator to release a resource before removing its finalizer.",
)
def main(namespace: str, release: str, timeout: float) -> None:
    """Delete a Helm release's OrbitMQ clusters, topics and consumer groups, and wait for them."""
    with Client(namespace=namespace) as client:
        left = uninstall(client, namespace, release, timeout, click.echo)
    if left:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
