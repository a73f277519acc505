"""``orbitmq-operator``: run the operator, in a cluster (its service account) or beside one
(``$KUBECONFIG``), watching some namespaces or all of them, one replica acting at a time.

Each flag also reads an ``ORBITMQ_OPERATOR_*`` environment variable (shown in ``--help``), so a
Deployment can configure it either way. Leader election is kopf peering (see
:mod:`orbitmq_operator.peering`): the operator waits at start for its peering object, which the
chart (or ``--print-peering | kubectl apply -f -``) creates; ``--standalone`` runs without it
(one replica, or tests).
"""

from __future__ import annotations

import dataclasses
import random
import sys

import click
import kopf
import yaml

from orbitmq_operator import metrics
from orbitmq_operator.builders.errors import SpecError
from orbitmq_operator.config import ENV_PREFIX, NamesrvMode, OperatorConfig, parse_overrides
from orbitmq_operator.peering import (
    PEERING_WAIT_S,
    PeeringMissing,
    missing_peerings,
    peering_crds,
    peering_objects,
    wait_for_peering,
)

PRIORITY_RANGE = (1, 1_000_000)
"""Random priorities from here: two replicas colliding on one is a one-in-a-million chance."""


@click.command(context_settings={"auto_envvar_prefix": ENV_PREFIX.rstrip("_"), "show_default": True})
@click.option("-n", "--namespace", "namespaces", multiple=True, help="Watch this namespace (repeatable).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Watch every namespace.")
@click.option("--metrics-port", type=int, default=8080, help="Prometheus /metrics port; 0 serves none.")
@click.option("--peering", default="orbitmq-operator", help="kopf peering object (leader election).")
@click.option("--standalone", is_flag=True, help="No peering: for one replica, or tests.")
@click.option(
    "--priority", type=int, default=None, help="Peering priority (default: random, distinct per replica)."
)
@click.option(
    "--liveness",
    default="http://0.0.0.0:8081/healthz",
    help="kopf's liveness endpoint for the pod's probe; empty disables it.",
)
@click.option(
    "--namesrv-mode",
    type=click.Choice([m.value for m in NamesrvMode]),
    default=NamesrvMode.SERVICE.value,
    help="How topic and group calls reach name servers: the Service's DNS name, or pod IPs.",
)
@click.option(
    "--namesrv-override",
    "namesrv_overrides",
    multiple=True,
    help="<namespace>/<cluster>=<host:port>: a fixed name-server address for one cluster.",
)
@click.option(
    "--peering-wait-s",
    type=float,
    default=PEERING_WAIT_S,
    help="How long to wait at start for the peering object (the chart creates it) before exiting 2.",
)
@click.option(
    "--print-peering-crds", is_flag=True, help="Print the peering CRDs (kubectl apply -f -) and exit."
)
@click.option(
    "--print-peering",
    is_flag=True,
    help="Print the peering object(s) of --peering for --namespace/--all-namespaces (kubectl apply "
    "-f -) and exit: for an install without the chart.",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    metrics_port: int,
    peering: str,
    standalone: bool,
    priority: int | None,
    liveness: str,
    namesrv_mode: str,
    namesrv_overrides: tuple[str, ...],
    peering_wait_s: float,
    print_peering_crds: bool,
    print_peering: bool,
    verbose: bool,
) -> None:
    """Run the orbitmq operator (clusters, topics, consumer groups, failover)."""
    if print_peering_crds:
        click.echo(yaml.safe_dump_all(peering_crds(), sort_keys=False), nl=False)
        return
    if bool(namespaces) == all_namespaces:
        raise click.UsageError("give either --namespace (one or more) or --all-namespaces")
    if print_peering:
        click.echo(yaml.safe_dump_all(peering_objects(peering, namespaces), sort_keys=False), nl=False)
        return
    try:
        overrides = parse_overrides(",".join(namesrv_overrides))
    except SpecError as error:
        raise click.BadParameter(error.problem, param_hint="--namesrv-override") from None
    # the resync periods are read from the environment only: kopf fixes a timer's interval
    # when its handler is registered (on import)
    config = dataclasses.replace(
        OperatorConfig.from_env(), namesrv_mode=NamesrvMode(namesrv_mode), namesrv_overrides=overrides
    )
    kopf.configure(verbose=verbose)
    if not standalone:
        _await_peering(peering, namespaces, peering_wait_s)
    if metrics_port:
        metrics.serve(metrics_port)
    import orbitmq_operator.handlers  # noqa: F401  (registers the handlers with kopf)

    kopf.run(
        clusterwide=all_namespaces,
        namespaces=list(namespaces),
        standalone=standalone,
        peering_name=None if standalone else peering,
        priority=priority if priority is not None else random.randint(*PRIORITY_RANGE),
        liveness_endpoint=liveness or None,
        memo=kopf.Memo(config=config),
    )


def _await_peering(name: str, namespaces: tuple[str, ...], timeout_s: float) -> None:
    from lightkube import ApiError, Client, KubeConfig

    try:
        with Client(config=KubeConfig.from_env()) as client:
            wait_for_peering(lambda: missing_peerings(client, name, namespaces), timeout_s)
    except PeeringMissing as error:
        click.echo(str(error), err=True)
        sys.exit(2)
    except ApiError as error:
        hint = "install the peering CRDs (orbitmq-operator --print-peering-crds | kubectl apply -f -)"
        if error.status.code != 404:
            hint = "check the operator's RBAC for kopf.dev peerings (get)"
        click.echo(f"cannot read peering object {name!r}: {error.status.message}; {hint}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
