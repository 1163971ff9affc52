"""Engine URLs, the id → engine book and the relay, without an engine."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from pathlib import Path

import pytest

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.providers import DOCKER_ENGINE_ENV
from cubicle.orchestrator.providers.docker.engine import (
    LOCAL_URL,
    Engine,
    EngineBook,
    default_engine,
    explicit_engine,
)
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.providers.docker.relay import relay


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://host:2375", "scheme must be one of"),
        ("host:2376", "scheme must be one of"),
        ("unix://", "no socket path"),
        ("tcp://:2376", "no host name"),
        ("tcp://host:port", "port is not a number"),
        ("ssh://", "no host name"),
    ],
)
def test_bad_engine_urls_are_refused_naming_what_is_wrong(url: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        Engine.parse(url)


def test_tcp_without_tls_files_is_refused_naming_them(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(ConfigError, match=r"cert\.pem, key\.pem not found in") as caught:
        Engine.parse("tcp://host:2376", cert_path=str(tmp_path))
    assert "plain tcp:// without TLS is refused" in str(caught.value.hint)
    for name in ("cert.pem", "key.pem"):
        (tmp_path / name).write_text("x")
    engine = Engine.parse("tcp://host:2376", cert_path=str(tmp_path))
    assert engine.cert_path == str(tmp_path.resolve()) and not engine.is_local


def test_selection_explicit_then_docker_host_then_local(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DOCKER_ENGINE_ENV, raising=False)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert explicit_engine() is None
    assert default_engine() == Engine(LOCAL_URL)
    monkeypatch.setenv("DOCKER_HOST", "ssh://me@elsewhere")
    assert default_engine() == Engine("ssh://me@elsewhere")
    monkeypatch.setenv(DOCKER_ENGINE_ENV, "unix:///run/other.sock")
    assert explicit_engine() == Engine("unix:///run/other.sock")
    assert DockerProvider().engine == Engine("unix:///run/other.sock")


def test_the_book_leads_an_id_to_its_engine_and_forgets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DOCKER_ENGINE_ENV, raising=False)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    book = EngineBook(tmp_path / "state" / "docker-engines")
    remote = Engine("ssh://me@box")
    book.record("dk-0123456789", remote)
    with pytest.raises(FileExistsError):  # written once
        book.record("dk-0123456789", Engine(LOCAL_URL))
    assert (book.folder / "dk-0123456789.json").stat().st_mode & 0o777 == 0o600
    assert book.folder.stat().st_mode & 0o777 == 0o700
    provider = DockerProvider(book=book)
    assert provider.engine_of("dk-0123456789") == remote
    assert provider.engine_of("dk-ffffffffff") == Engine(LOCAL_URL)  # not in the book
    assert provider.engines() == [Engine(LOCAL_URL), remote]
    entry = book.lookup("dk-0123456789")
    assert entry is not None and entry.owner_pid == os.getpid() and not entry.owner_gone()
    book.forget("dk-0123456789")
    assert book.lookup("dk-0123456789") is None and provider.engines() == [Engine(LOCAL_URL)]


def test_an_unreadable_book_entry_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    book = EngineBook(tmp_path)
    (tmp_path / "dk-0123456789.json").write_text("{not json")
    assert book.lookup("dk-0123456789") is None
    assert list(book.entries()) == []
    assert "ignoring the engine book entry" in caplog.text


def _tls_pair(tmp_path: Path) -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
    """Two ends of a real TLS connection over a socket pair (certificate from tests/remote)."""
    from tests.remote.enginebox import make_tls  # noqa: PLC0415

    tls = make_tls(tmp_path / "tls", "127.0.0.1")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tls.server_dir / "cert.pem", tls.server_dir / "key.pem")
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(tls.client_dir / "ca.pem")
    a, b = socket.socketpair()
    out: dict[str, ssl.SSLSocket] = {}
    thread = threading.Thread(
        target=lambda: out.setdefault("server", server_ctx.wrap_socket(b, server_side=True))
    )
    thread.start()
    client = client_ctx.wrap_socket(a, server_hostname="127.0.0.1")
    thread.join()
    return client, out["server"]


def test_relay_carries_every_byte_both_ways_over_tls_and_ends_cleanly(tmp_path: Path) -> None:
    """Across a TLS stream (what a tcp:// engine's exec is): 8 MB each way, all 256 byte values,
    then the engine's end closing reads as end-of-file on ours, and closing ours closes it."""
    engine_side, far = _tls_pair(tmp_path)
    ours = relay(engine_side, "test")
    payload = bytes(range(256)) * (8 * 4096)
    echoed = bytearray()

    def echo() -> None:  # the far end: echo everything back, then close
        got = bytearray()
        while len(got) < len(payload):
            got += far.recv(65536)
        far.sendall(got)
        far.close()

    thread = threading.Thread(target=echo)
    thread.start()
    sender = threading.Thread(target=ours.sendall, args=(payload,))
    sender.start()
    while chunk := ours.recv(65536):
        echoed += chunk
    sender.join()
    thread.join()
    assert bytes(echoed) == payload
    ours.close()


def test_cli_names_a_bad_engine_url(capsys: pytest.CaptureFixture[str]) -> None:
    from cubicle.orchestrator.cli import main  # noqa: PLC0415

    assert main(["ls", "--engine", "http://box:2375"]) == 1
    err = capsys.readouterr().err
    assert "'http://box:2375': the scheme must be one of unix://, tcp://, ssh://" in err
    assert DOCKER_ENGINE_ENV not in os.environ  # --engine lasts one command


def test_no_idle_agent_connection_is_held_over_ssh() -> None:
    """Over ssh:// each held connection is one of sshd's 10 sessions (MaxSessions), which the
    engine's API calls need too: a new sandbox keeps no spare connection there (tests/remote
    shows two sandboxes up at once failing the next API call otherwise)."""
    assert not DockerProvider(engine=Engine("ssh://me@elsewhere")).keeps_spare_connection()
    assert DockerProvider(engine=Engine(LOCAL_URL)).keeps_spare_connection()
