"""``orbitmq admin user …`` and ``orbitmq admin acl …``: users and ACL 2.0 policies stored on the
brokers (RocketMQ 5.3 ``mqadmin createUser``/``updateUser``/``deleteUser``/``getUser``/``listUser``
and ``createAcl``/``updateAcl``/``deleteAcl``/``getAcl``/``listAcl``).

Options are checked before anything is sent, and a document the brokers refuse for what it says
(an overlap with a stored entry, an ACL for no user) is bad input as well: both exit with status
2 naming the option or field and the rule, as click's own usage errors do. Other failures (no
broker, a refused permission) exit 1. Secrets are never shown: brokers do not answer them.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import click
import grpc
import yaml

from orbitmq.auth.model import Action, Decision, PolicyType, Resource, UserStatus, UserType
from orbitmq.cli.admin_base import common, run_admin
from orbitmq.cli.common import emit_object, emit_rows
from orbitmq.client.admin import Admin
from orbitmq.client.admin_auth import InvalidAuthDocument, PerBroker, check_acl
from orbitmq.common.rpc import failure_of
from orbitmq.v1.broker_pb2 import ErrorReason


class BadInput(click.ClickException):
    """A refused option or document: exit status 2, as click's usage errors."""

    exit_code = 2


def _run(work: Callable[[Admin], Awaitable[Any]], namesrv: str) -> Any:
    """:func:`run_admin`, with a document the brokers refuse as INVALID_ARGUMENT made bad input."""

    async def checked(admin: Admin) -> Any:
        try:
            return await work(admin)
        except InvalidAuthDocument as error:
            raise BadInput(str(error)) from None
        except grpc.aio.AioRpcError as error:
            failure = failure_of(error)
            if failure is not None and failure.reason == ErrorReason.INVALID_ARGUMENT:
                raise BadInput(f"{error.details()} [{failure.reason_name}]") from None
            raise

    return run_admin(checked, namesrv)


def _merged(per_broker: PerBroker, key: str) -> list[dict[str, Any]]:
    """One row per distinct document, with the masters holding it (``brokers``): a master that
    missed a change shows as a row of its own."""
    rows: dict[str, dict[str, Any]] = {}
    for address, documents in sorted(per_broker.items()):
        for document in documents:
            seen = rows.setdefault(json.dumps(document, sort_keys=True), {**document, "brokers": []})
            seen["brokers"].append(address)
    return sorted(rows.values(), key=lambda row: (str(row.get(key)), row["brokers"]))


# -- option parsing -----------------------------------------------------------------------------


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _resources(_: click.Context, __: click.Parameter, value: str | None) -> list[str]:
    names = _split(value)
    for name in names:
        try:
            Resource.parse(name)
        except ValueError as error:
            raise click.BadParameter(str(error)) from None
    return names


def _actions(_: click.Context, __: click.Parameter, value: str | None) -> list[str]:
    names = _split(value)
    known = {a.value.lower(): a.value for a in Action}
    for name in names:
        if name.lower() not in known:
            raise click.BadParameter(f"unknown action {name!r} (one of {', '.join(a.value for a in Action)})")
    return [known[n.lower()] for n in names]


def _source_ips(_: click.Context, __: click.Parameter, value: str | None) -> list[str]:
    blocks = _split(value)
    for block in blocks:
        try:
            ipaddress.ip_network(block, strict=True)
        except ValueError as error:
            raise click.BadParameter(f"{block!r} is not an address or CIDR block: {error}") from None
    return blocks


def _choice(values: type[Any]) -> click.Choice:
    return click.Choice([v.value for v in values], case_sensitive=False)


def _normalized(values: type[Any], given: str | None) -> str | None:
    """A case-insensitive choice spelled as the document spells it (``super`` → ``Super``)."""
    if given is None:
        return None
    return next(v.value for v in values if v.value.lower() == given.lower())


def acl_document(
    subject: str,
    resources: Sequence[str],
    actions: Sequence[str],
    decision: str,
    source_ips: Sequence[str] = (),
    policy_type: str = PolicyType.CUSTOM.value,
) -> dict[str, Any]:
    """The ACL mqadmin createAcl's options describe: one entry per resource, each with the
    same actions, source IPs and decision."""
    entries = [
        {"resource": r, "actions": list(actions), "sourceIps": list(source_ips), "decision": decision}
        for r in resources
    ]
    return {"subject": subject, "policies": [{"policyType": policy_type, "entries": entries}]}


def _file_documents(path: Path) -> list[dict[str, Any]]:
    """One ACL document, or a list of them, from a JSON or YAML file."""
    try:
        loaded = yaml.safe_load(path.expanduser().read_text())
    except OSError as error:
        raise BadInput(f"--file {path}: cannot read it: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise BadInput(f"--file {path}: not JSON or YAML: {error}") from None
    documents = loaded if isinstance(loaded, list) else [loaded]
    for i, document in enumerate(documents):
        if not isinstance(document, dict):
            raise BadInput(f"--file {path}: document {i} is not an ACL object (subject, policies)")
    return documents


# -- users ----------------------------------------------------------------------------------------

_CLUSTER = click.option("--cluster", help="Every master of this cluster (default: every master).")
_USERNAME = click.option("--username", "-u", required=True, help="The user's name: its access key.")
_USER_TYPE_HELP = "Super: allowed everything, no ACL needed; Normal: what its ACL allows."
_USER_STATUS_HELP = "disable: refused everything (its ACL is kept)."


@click.group("user")
def user() -> None:
    """Create, update, delete and show users (their username is the access key, their password
    the secret requests are signed with). Brokers never answer a secret."""


@user.command("create")
@_USERNAME
@click.option(
    "--password",
    "-p",
    envvar="ORBITMQ_USER_PASSWORD",
    help="The secret (or ORBITMQ_USER_PASSWORD; prompted when neither is given on a terminal).",
)
@click.option(
    "--user-type", "-t", type=_choice(UserType), default="Normal", show_default=True, help=_USER_TYPE_HELP
)
@click.option(
    "--user-status",
    "-s",
    type=_choice(UserStatus),
    default="enable",
    show_default=True,
    help=_USER_STATUS_HELP,
)
@_CLUSTER
@common
def user_create(
    namesrv: str,
    as_json: bool,
    username: str,
    password: str | None,
    user_type: str,
    user_status: str,
    cluster: str | None,
) -> None:
    """Create a user on every master (RocketMQ createUser). Brokers never answer a secret
    back: keep it where you set it."""
    if password is None:
        if not sys.stdin.isatty():
            raise click.BadParameter(
                "a user needs a secret: give --password or ORBITMQ_USER_PASSWORD (no terminal to prompt on)",
                param_hint="--password",
            )
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    user_type, user_status = _normalized(UserType, user_type), _normalized(UserStatus, user_status)  # type: ignore[assignment]
    brokers = _run(
        lambda a: a.create_user(
            username, password, user_type=user_type, user_status=user_status, cluster=cluster
        ),
        namesrv,
    )
    emit_object(
        {"username": username, "userType": user_type, "userStatus": user_status, "brokers": brokers}, as_json
    )


@user.command("update")
@_USERNAME
@click.option("--password", "-p", help="A new secret.")
@click.option("--user-type", "-t", type=_choice(UserType), help=_USER_TYPE_HELP)
@click.option("--user-status", "-s", type=_choice(UserStatus), help=_USER_STATUS_HELP)
@_CLUSTER
@common
def user_update(
    namesrv: str,
    as_json: bool,
    username: str,
    password: str | None,
    user_type: str | None,
    user_status: str | None,
    cluster: str | None,
) -> None:
    """Change a user's secret, type or status on every master that has it (RocketMQ updateUser);
    what is not given is kept."""
    kind, status = _normalized(UserType, user_type), _normalized(UserStatus, user_status)
    brokers = _run(
        lambda a: a.update_user(
            username, password=password, user_type=kind, user_status=status, cluster=cluster
        ),
        namesrv,
    )
    changed = {
        "password": "(changed)" if password is not None else None,
        "userType": kind,
        "userStatus": status,
    }
    emit_object(
        {"username": username, **{k: v for k, v in changed.items() if v}, "brokers": brokers}, as_json
    )


@user.command("delete")
@_USERNAME
@_CLUSTER
@common
def user_delete(namesrv: str, as_json: bool, username: str, cluster: str | None) -> None:
    """Delete a user and its ACL on every master that has it (RocketMQ deleteUser)."""
    brokers = _run(lambda a: a.delete_user(username, cluster), namesrv)
    emit_object({"username": username, "deleted_on": brokers}, as_json)


_USER_COLUMNS = ["username", "userType", "userStatus", "brokers"]


@user.command("get")
@_USERNAME
@_CLUSTER
@common
def user_get(namesrv: str, as_json: bool, username: str, cluster: str | None) -> None:
    """A user's type and status, as each master holds it (never its secret)."""
    rows = _merged(_run(lambda a: a.user(username, cluster), namesrv), "username")
    emit_rows(rows, _USER_COLUMNS, as_json)


@user.command("list")
@click.option("--filter", "contains", default="", help="Only usernames containing this text.")
@_CLUSTER
@common
def user_list(namesrv: str, as_json: bool, contains: str, cluster: str | None) -> None:
    """Users of every master (RocketMQ listUser), one row per user as the masters hold it."""
    rows = _merged(_run(lambda a: a.users(contains, cluster), namesrv), "username")
    emit_rows(rows, _USER_COLUMNS, as_json)


# -- ACLs -----------------------------------------------------------------------------------------


@click.group("acl")
def acl() -> None:
    """Create, update, delete and show ACL 2.0 policies (per user: resources Cluster:, Topic:,
    Group: exact, prefix* or *; actions Pub Sub Create Update Delete Get List All; Allow/Deny;
    optional source IP blocks)."""


_SUBJECT = click.option("--subject", "-s", help="User:<username>.")


def _policy_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            _SUBJECT,
            click.option(
                "--resources",
                "-r",
                callback=_resources,
                help="Comma-separated: Topic:orders,Topic:order-*,Group:g1,Cluster:DefaultCluster,*.",
            ),
            click.option(
                "--actions", "-a", callback=_actions, help="Comma-separated: Pub,Sub,Get,... or All."
            ),
            click.option(
                "--source-ips",
                "-i",
                callback=_source_ips,
                help="Comma-separated CIDR blocks (default: anywhere).",
            ),
            click.option("--decision", "-d", type=_choice(Decision), help="Allow or Deny."),
            click.option(
                "--policy-type",
                type=_choice(PolicyType),
                default="Custom",
                show_default=True,
                help="Default entries are consulted only when no Custom entry matches.",
            ),
            click.option(
                "--file",
                "-f",
                "file",
                type=click.Path(path_type=Path, dir_okay=False),
                help="An ACL document (or a list of them), JSON or YAML, in RocketMQ's shape, "
                "instead of the options above.",
            ),
            _CLUSTER,
        ]
    ):
        function = option(function)
    return common(function)


def _documents(
    subject: str | None,
    resources: list[str],
    actions: list[str],
    source_ips: list[str],
    decision: str | None,
    policy_type: str,
    file: Path | None,
) -> list[dict[str, Any]]:
    """The ACL documents the options or ``--file`` describe, each checked (field and rule named)."""
    if file is not None:
        if subject or resources or actions or source_ips or decision:
            raise BadInput(
                "--file replaces --subject, --resources, --actions, --source-ips and --decision: "
                "give one or the other"
            )
        documents = _file_documents(file)
    else:
        for flag, value in (("--subject", subject), ("--resources", resources), ("--actions", actions)):
            if not value:
                raise BadInput(f"{flag} is required (or --file)")
        if decision is None:
            raise BadInput("--decision is required (Allow or Deny)")
        documents = [
            acl_document(
                subject or "",
                resources,
                actions,
                _normalized(Decision, decision) or "",
                source_ips,
                _normalized(PolicyType, policy_type) or "",
            )
        ]
    for document in documents:
        try:
            check_acl(document)
        except InvalidAuthDocument as error:
            raise BadInput(str(error)) from None
    return documents


def _acl_rows(per_broker: PerBroker) -> list[dict[str, Any]]:
    """One row per entry of each distinct ACL, with the masters holding that ACL."""
    rows = []
    for acl_row in _merged(per_broker, "subject"):
        for policy in acl_row["policies"]:
            for entry in policy["entries"]:
                rows.append(
                    {
                        "subject": acl_row["subject"],
                        "policyType": policy["policyType"],
                        **entry,
                        "brokers": acl_row["brokers"],
                    }
                )
    return rows


_ACL_COLUMNS = ["subject", "policyType", "resource", "actions", "sourceIps", "decision", "brokers"]


def _emit_acls(per_broker: PerBroker, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(_merged(per_broker, "subject")))
    else:
        emit_rows(_acl_rows(per_broker), _ACL_COLUMNS, as_json)


def _apply(change: str, documents: list[dict[str, Any]], cluster: str | None, namesrv: str) -> PerBroker:
    async def work(a: Admin) -> PerBroker:
        found: PerBroker = {}
        for document in documents:
            method = a.create_acl if change == "create" else a.update_acl
            for address, acls in (await method(document, cluster)).items():
                found.setdefault(address, []).extend(acls)
        return found

    return _run(work, namesrv)  # type: ignore[no-any-return]


@acl.command("create")
@_policy_options
def acl_create(namesrv: str, as_json: bool, cluster: str | None, **options: Any) -> None:
    """Add entries to a user's ACL on every master (RocketMQ createAcl): one per resource, with
    the same actions, source IPs and decision. An entry for a resource the ACL already has is
    refused as an overlap ('acl update' replaces it). Shows the ACL afterwards."""
    _emit_acls(_apply("create", _documents(**options), cluster, namesrv), as_json)


@acl.command("update")
@_policy_options
def acl_update(namesrv: str, as_json: bool, cluster: str | None, **options: Any) -> None:
    """Set entries of a user's ACL on every master (RocketMQ updateAcl): an entry for the same
    resource (and policy type) is replaced, the others kept; the ACL is created if absent."""
    _emit_acls(_apply("update", _documents(**options), cluster, namesrv), as_json)


@acl.command("delete")
@click.option("--subject", "-s", required=True, help="User:<username>.")
@click.option(
    "--resources",
    "-r",
    callback=_resources,
    help="Only the entries for these (comma-separated); default: all.",
)
@click.option(
    "--policy-type", type=_choice(PolicyType), help="Only entries of this policy type (default: either)."
)
@_CLUSTER
@common
def acl_delete(
    namesrv: str,
    as_json: bool,
    subject: str,
    resources: list[str],
    policy_type: str | None,
    cluster: str | None,
) -> None:
    """Delete a user's ACL, or some of its entries, on every master that has it (RocketMQ deleteAcl)."""
    kind = _normalized(PolicyType, policy_type) or ""
    brokers = _run(lambda a: a.delete_acl(subject, resources, kind, cluster), namesrv)
    emit_object({"subject": subject, "resources": resources or "(all)", "deleted_on": brokers}, as_json)


@acl.command("get")
@click.option("--subject", "-s", required=True, help="User:<username>.")
@_CLUSTER
@common
def acl_get(namesrv: str, as_json: bool, subject: str, cluster: str | None) -> None:
    """A user's ACL as each master holds it (RocketMQ getAcl)."""
    _emit_acls(_run(lambda a: a.acl(subject, cluster), namesrv), as_json)


@acl.command("list")
@click.option("--subject", "subject", default="", help="Only subjects containing this text.")
@click.option("--resource", default="", help="Only ACLs with an entry whose resource contains this text.")
@_CLUSTER
@common
def acl_list(namesrv: str, as_json: bool, subject: str, resource: str, cluster: str | None) -> None:
    """ACLs of every master (RocketMQ listAcl), one row per entry."""
    _emit_acls(_run(lambda a: a.acls(subject, resource, cluster), namesrv), as_json)
