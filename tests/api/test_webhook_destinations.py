"""Webhooks reach public addresses only: every spelling of an inside address is refused when the
job is submitted, a destination that turns inside later is refused when the event is sent (and the
tenant reads nothing about the inside), redirects are not followed, and an operator's allow-list
opens on-premises receivers."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from conductor.app.tenants import create_key
from conductor.app.webhooks import deliveries
from conductor.config.settings import Settings
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.webhook_receiver import Receiver

#: The loopback receiver, spelled every way a URL parser or resolver accepts ({port} filled in).
LOOPBACK_SPELLINGS = [
    "http://127.0.0.1:{port}/hook",
    "http://localhost:{port}/hook",
    "http://[::1]:{port}/hook",
    "http://[::ffff:127.0.0.1]:{port}/hook",
    "http://2130706433:{port}/hook",
    "http://0x7f000001:{port}/hook",
    "http://0177.0.0.1:{port}/hook",
    "http://127.1:{port}/hook",
    "http://0.0.0.0:{port}/hook",
    "http://127.0.0.2:{port}/hook",
    "http://localhost.:{port}/hook",
]
#: A name only the tests' resolver knows, and a public address for it (no packet is sent there).
HOOKS_HOST = "hooks.conductor-test.example"
PUBLIC_IP = "93.184.215.14"


@contextmanager
def api(tmp_path: Path, scripted: ScriptedLLMServer, **kwargs: Any) -> Iterator[TestClient]:
    pool_file = write_pool(scripted_pool(scripted.base_url), tmp_path / "pool.yaml")
    settings = Settings(
        home=tmp_path,
        broker_url="memory://",
        pool_file=pool_file,
        recursion=False,
        webhook_backoff_s=60,  # one attempt within a test
        webhook_timeout_s=2,
        **kwargs,
    )
    with TestClient(create_app(settings)) as client:
        yield client


def _key(client: TestClient, tenant: str, **kwargs: Any) -> tuple[dict[str, str], str]:
    key, tenant_id = create_key(client.app.state.api.sessions, tenant, **kwargs)  # type: ignore[attr-defined]
    return {"Authorization": f"Bearer {key}"}, tenant_id


def _submit(client: TestClient, auth: dict[str, str], url: str | None = None) -> Any:
    body: dict[str, Any] = {"problem": {"question": "[wf:single] hook me"}}
    if url is not None:
        body["webhook_url"] = url
    return client.post("/v1/jobs", json=body, headers=auth)


def _attempts(client: TestClient, tenant_id: str, n: int = 1, timeout: float = 20) -> list[dict[str, Any]]:
    """The tenant's delivery attempts, once there are `n` of them."""
    sessions = client.app.state.api.sessions  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tries = [a for d in deliveries(sessions, tenant_id) for a in d["attempts"]]
        if len(tries) >= n:
            return tries
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} delivery attempts after {timeout} s")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(fail=0)
    yield r
    r.httpd.shutdown()


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], list[str]]:
    """Make HOOKS_HOST resolve to the given answers, one per lookup (the last one repeats); returns
    the log of answers given. Every other name goes to the system's resolver."""
    real = socket.getaddrinfo
    answers: list[str] = []
    given: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != HOOKS_HOST:
            return real(host, port, *args, **kwargs)
        ip = answers.pop(0) if len(answers) > 1 else answers[0]
        given.append(ip)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    def answer(ips: list[str]) -> list[str]:
        answers[:] = ips
        return given

    return answer


@pytest.mark.parametrize("spelling", LOOPBACK_SPELLINGS)
def test_every_spelling_of_loopback_is_refused_at_submit(tmp_path, scripted, receiver, spelling):
    with api(tmp_path, scripted) as client:
        auth, _ = _key(client, "acme")
        r = _submit(client, auth, spelling.format(port=receiver.port))
        jobs = client.get("/v1/jobs", headers=auth).json()["data"]
    assert r.status_code == 400, r.text
    assert "must resolve to public addresses only" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "webhook_url"
    assert jobs == []  # nothing written
    assert receiver.requests == []


@pytest.mark.parametrize("url", ["ftp://example.com/hook", "http:///hook", "http://[::1/hook"])
def test_a_webhook_url_that_is_not_http_is_refused_at_submit(tmp_path, scripted, url):
    with api(tmp_path, scripted) as client:
        auth, _ = _key(client, "acme")
        assert _submit(client, auth, url).status_code == 400


def test_a_loopback_receiver_set_by_an_operator_gets_nothing(tmp_path, scripted, receiver):
    with api(tmp_path, scripted) as client:
        auth, tenant_id = _key(client, "acme", webhook_url=receiver.url)  # the tenant's endpoint: no submit check
        assert _submit(client, auth).status_code == 201
        (attempt,) = _attempts(client, tenant_id)
    assert receiver.requests == []
    assert attempt == {
        "attempt": 1,
        "status_code": None,
        "error": "destination not allowed",
        "duration_s": attempt["duration_s"],
    }


def test_allowed_receivers_are_delivered_to_by_address_and_by_name(tmp_path, scripted, receiver):
    with api(tmp_path, scripted, webhook_allow=("127.0.0.1/32", "localhost")) as client:
        auth, tenant_id = _key(client, "acme")
        assert _submit(client, auth, receiver.url).status_code == 201
        assert _submit(client, auth, f"http://localhost:{receiver.port}/hook").status_code == 201
        assert _submit(client, auth, f"http://127.0.0.2:{receiver.port}/hook").status_code == 400  # not on the list
        tries = _attempts(client, tenant_id, n=2)
    assert [a["status_code"] for a in tries] == [204, 204]
    assert len(receiver.requests) == 2


def test_a_name_that_turns_inside_after_submit_is_refused_at_send_and_said_generically(
    tmp_path, scripted, receiver, resolver
):
    resolver([PUBLIC_IP, "127.0.0.1"])  # public when checked at submit, loopback when sent
    with api(tmp_path, scripted) as client:
        auth, tenant_id = _key(client, "acme")
        r = _submit(client, auth, f"http://{HOOKS_HOST}:{receiver.port}/hook")
        assert r.status_code == 201, r.text
        (attempt,) = _attempts(client, tenant_id)
        (delivery,) = client.get("/v1/webhooks/deliveries", headers=auth).json()["data"]
    assert receiver.requests == []
    assert attempt["error"] == delivery["last_error"] == "destination not allowed"
    assert "127.0.0.1" not in str(delivery["attempts"])


def test_the_address_checked_at_send_is_the_address_connected_to(tmp_path, scripted, receiver, resolver):
    inside = Receiver(fail=0, host="127.0.0.2", port=receiver.port)  # same port, another (refused) address
    try:
        # Allowed at submit and at the send's lookup; a second lookup at connect would get the inside one.
        given = resolver(["127.0.0.1", "127.0.0.1", "127.0.0.2"])
        with api(tmp_path, scripted, webhook_allow=("127.0.0.1",)) as client:
            auth, tenant_id = _key(client, "acme")
            assert _submit(client, auth, f"http://{HOOKS_HOST}:{receiver.port}/hook").status_code == 201
            (attempt,) = _attempts(client, tenant_id)
    finally:
        inside.httpd.shutdown()
    assert attempt["status_code"] == 204
    assert len(receiver.requests) == 1 and inside.requests == []
    assert receiver.requests[0][0]["host"] == f"{HOOKS_HOST}:{receiver.port}"  # the name, not the address
    assert given == ["127.0.0.1", "127.0.0.1"], "one lookup at submit, one at send"


def test_redirects_are_not_followed(tmp_path, scripted, receiver):
    redirecting = Receiver(fail=0, redirect_to=receiver.url)
    try:
        with api(tmp_path, scripted, webhook_allow=("127.0.0.1",)) as client:
            auth, tenant_id = _key(client, "acme")
            assert _submit(client, auth, redirecting.url).status_code == 201
            (attempt,) = _attempts(client, tenant_id)
    finally:
        redirecting.httpd.shutdown()
    assert len(redirecting.requests) == 1 and receiver.requests == []
    assert attempt["status_code"] == 307 and attempt["error"] == "HTTP 307"


def test_connection_errors_read_the_same_whatever_the_inside_said(tmp_path, scripted):
    with socket.socket() as closed:  # a port nothing listens on: "connection refused" inside
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with api(tmp_path, scripted, webhook_allow=("127.0.0.1",)) as client:
        auth, tenant_id = _key(client, "acme")
        assert _submit(client, auth, f"http://127.0.0.1:{port}/hook").status_code == 201
        (attempt,) = _attempts(client, tenant_id)
    assert attempt["error"] == "could not connect"
