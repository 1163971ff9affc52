"""The egress proxy as deployed — its one-file bundle (cubicle.egress.bundle) run by ``python -I``
(ours, and the system python3 with Debian's python3-h11, which Docker's image and the VM host use) —
against local upstream servers: tunnels, bodies in both framings, 100-continue, HTTP/1.0, and a
clear, logged refusal for every malformed request."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.egress import egress_proxy, statuses, upstream

SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin")


def _has_h11(python: str | None) -> bool:
    if python is None:
        return False
    done = subprocess.run([python, "-I", "-c", "import h11"], capture_output=True, check=False)
    return done.returncode == 0


PYTHONS = [
    pytest.param(sys.executable, id="venv"),
    pytest.param(
        SYSTEM_PYTHON or "/usr/bin/python3",
        id="system",
        marks=pytest.mark.skipif(
            not _has_h11(SYSTEM_PYTHON),
            reason="the system python3 lacks h11: run scripts/ensure-host-packages",
        ),
    ),
]


@pytest.mark.parametrize("python", PYTHONS)
def test_connect_tunnels_to_the_allowed_origin_only(python: str) -> None:
    with (
        upstream("allowed") as allowed,
        upstream("other") as other,
        egress_proxy(f"127.0.0.1:{allowed.port}", python=python) as proxy,
    ):
        inner = b"GET /inside HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        tunnelled = proxy.exchange(
            f"CONNECT 127.0.0.1:{allowed.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), then=inner
        )
        refused = proxy.exchange(
            f"CONNECT 127.0.0.1:{other.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode() + inner
        )
        decisions = proxy.decisions(2)
    assert statuses(tunnelled) == [200, 200], tunnelled
    assert tunnelled.endswith(b"\r\n\r\nallowed")
    assert statuses(refused) == [403], refused
    assert allowed.paths == ["/inside"]
    assert other.paths == []
    assert [(d["decision"], d["method"], d["port"]) for d in decisions] == [
        ("allow", "CONNECT", allowed.port),
        ("refuse", "CONNECT", other.port),
    ]


@pytest.mark.parametrize("python", PYTHONS)
def test_request_bodies_and_protocol_versions(python: str) -> None:
    with upstream("up") as up, egress_proxy(f"127.0.0.1:{up.port}", python=python) as proxy:
        base = f"http://127.0.0.1:{up.port}"
        sized = proxy.exchange(
            f"POST {base}/sized HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            "Connection: close\r\n\r\nhello".encode()
        )
        chunked = proxy.exchange(
            f"PUT {base}/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            "Connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n".encode()
        )
        http10 = proxy.exchange(f"GET {base}/old HTTP/1.0\r\n\r\n".encode())
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=15) as sock:
            sock.sendall(
                f"POST {base}/continue HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                "Expect: 100-continue\r\nConnection: close\r\n\r\n".encode()
            )
            interim = sock.recv(65536)  # the proxy says go on before it has the body
            sock.sendall(b"ok")
            rest = b""
            while chunk := sock.recv(65536):
                rest += chunk
    assert statuses(sized) == [200] and sized.endswith(b"\r\n\r\nup"), sized
    assert statuses(chunked) == [200] and chunked.endswith(b"\r\n\r\nup"), chunked
    assert statuses(http10) == [200] and http10.endswith(b"\r\n\r\nup"), http10
    assert statuses(interim) == [100], interim
    assert statuses(rest) == [200], rest
    assert [(s.path, s.body) for s in up.seen] == [
        ("/sized", b"hello"),
        ("/chunked", b"abcde"),
        ("/old", b""),
        ("/continue", b"ok"),
    ]


MALFORMED = {
    "not http": (b"NONSENSE\r\n\r\n", 400),
    "origin-form": (b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", 400),
    "https must be tunnelled": (b"GET https://127.0.0.1/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    "other scheme": (b"GET ftp://127.0.0.1/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    "user info": (b"GET http://u@127.0.0.1/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    "connect without port": (b"CONNECT 127.0.0.1 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    "port too big": (b"GET http://127.0.0.1:99999/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    "fullwidth port": ("CONNECT a:\uff18\uff10 HTTP/1.1\r\nHost: a\r\n\r\n".encode(), 400),
    "non-ascii target": (b"GET http://a:\xb9/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    "no host header": (b"GET http://127.0.0.1/ HTTP/1.1\r\n\r\n", 400),
    "bad header": (b"GET http://127.0.0.1/ HTTP/1.1\r\nHost a\r\n\r\n", 400),
    "head too large": (
        b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: a\r\nX: " + b"y" * 100_000 + b"\r\n\r\n",
        431,
    ),
    "half a head, then close": (b"GET http://127.0.0.1/ HTTP/1.1\r\nHo", 400),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_requests_are_answered_and_logged(name: str) -> None:
    data, status = MALFORMED[name]
    with upstream("up") as up, egress_proxy("127.0.0.1") as proxy:
        reply = proxy.exchange(data, end=True)
        [decision] = proxy.decisions(1)
    assert statuses(reply) == [status], reply
    assert decision["decision"] == "refuse", decision
    assert decision["reason"], decision
    assert up.seen == []


TEXT = st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=30)
TARGETS = st.one_of(
    TEXT,
    st.builds(lambda host, port: f"{host}:{port}", TEXT, TEXT),
    st.builds(lambda host, rest: f"http://{host}{rest}", TEXT, TEXT),
    st.builds(lambda port, rest: f"http://127.0.0.1:{port}{rest}", TEXT, TEXT),
)
HEADS = st.builds(
    lambda method, target, version, headers: (
        f"{method} {target} {version}\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n"
    ).encode("latin-1"),
    st.sampled_from(["GET", "CONNECT", "POST", "get", "", "GET GET"]) | TEXT,
    TARGETS,
    st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "", "HTTP/1.1 x"]),
    st.lists(st.sampled_from(["Host: a", "Content-Length: 0", "Expect: x"]) | TEXT, max_size=4),
)


def test_fuzzed_requests_always_get_an_answer_and_a_log_line() -> None:
    """Whatever request head arrives, the proxy answers it and logs exactly one decision (and
    stays up): no request escapes judgement or crashes a handler."""
    with upstream("up") as up, egress_proxy(f"127.0.0.1:{up.port}") as proxy:
        count = 0

        @settings(max_examples=150, deadline=None)
        @given(head=HEADS)
        def one(head: bytes) -> None:
            nonlocal count
            reply = proxy.exchange(head, end=True)
            count += 1
            decisions = proxy.decisions(count)
            assert len(decisions) == count, (head, decisions[-2:])
            assert len(statuses(reply)) == 1, (head, reply)

        one()
