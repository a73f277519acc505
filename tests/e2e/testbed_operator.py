"""A tiny kopf operator used only by the e2e smoke test (run via ``kopf.testing.KopfRunner``).

For every ``Echo`` (``echoes.testbed.orbitmq.io``) it creates a ConfigMap ``<name>-echo``
holding ``spec.message``.  It proves that kopf can log in to the test bed with nothing but
``KUBECONFIG`` (kopf's built-in kubeconfig login), watch a CRD, and write objects back.

The project does not depend on a Kubernetes client library, so the handler talks to the API
with aiohttp (already a kopf dependency) using the very credentials kopf logged in with.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import kopf

GROUP = "testbed.orbitmq.io"
VERSION = "v1"
PLURAL = "echoes"

# Filled by the login handler; the create handler reuses it for its own API calls.
_connection: kopf.ConnectionInfo | None = None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Quick posting/watching so the test does not wait on kopf's production-friendly defaults."""
    settings.posting.level = 0
    settings.watching.server_timeout = 60
    settings.networking.request_timeout = 30


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Log in exactly like kopf's default handler would (from $KUBECONFIG) and remember it."""
    global _connection
    _connection = kopf.login_with_kubeconfig(**kwargs)
    return _connection


def _data(value: str | bytes | None) -> bytes:
    """kubeconfig *-data fields are base64 strings."""
    if value is None:
        raise kopf.PermanentError("kubeconfig lacks embedded credentials")
    return base64.b64decode(value)


def _ssl_context(conn: kopf.ConnectionInfo, tmp: Path) -> ssl.SSLContext:
    """TLS with the kubeconfig's CA and client certificate (ssl wants the pair as files)."""
    ctx = ssl.create_default_context(cadata=_data(conn.ca_data).decode())
    cert, key = tmp / "client.crt", tmp / "client.key"
    cert.write_bytes(_data(conn.certificate_data))
    key.write_bytes(_data(conn.private_key_data))
    os.chmod(key, 0o600)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


@kopf.on.create(GROUP, VERSION, PLURAL)
async def create_echo_configmap(
    spec: kopf.Spec, name: str, namespace: str, body: kopf.Body, logger: kopf.Logger, **_: Any
) -> dict[str, str]:
    """Create the ConfigMap for a new Echo; owned by it, so deleting the Echo cleans it up."""
    if _connection is None:
        raise kopf.TemporaryError("not logged in yet", delay=1)
    configmap: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-echo", "labels": {"testbed.orbitmq.io/echo": name}},
        "data": {"message": str(spec.get("message", ""))},
    }
    kopf.adopt(configmap, owner=body)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = _ssl_context(_connection, Path(tmp))
        url = f"{_connection.server}/api/v1/namespaces/{namespace}/configmaps"
        async with aiohttp.ClientSession() as session, session.post(url, json=configmap, ssl=ctx) as resp:
            text = await resp.text()
            if resp.status == 409:
                logger.info("ConfigMap %s-echo already exists", name)
            elif resp.status >= 400:
                raise kopf.TemporaryError(f"creating ConfigMap failed: {resp.status} {text}", delay=2)
    logger.info("created ConfigMap %s-echo", name)
    return {"configmap": f"{name}-echo"}
