"""Ask mode of the egress proxy as deployed (its one-file bundle run with ``python
-I``), its control socket and the host-side API (cubicle/orchestrator/origin_questions.py): held
requests, approve, deny, cancel, timeout, shared questions, the log. Upstreams listen on a
non-loopback host address, which the proxy is told it may reach (``--allow-internal HOST/32``:
an ask-approved destination reaches public addresses only, never a loopback one). A refusal
tells the guest only that the policy refused; who refused and why is asserted on the log. No
Docker here; the same over a real sandbox is tests/orchestrator/test_docker_ask.py."""

from __future__ import annotations

import asyncio
import json
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from cubicle.egress import origins
from cubicle.egress import questions as egress_questions
from cubicle.orchestrator.origin_questions import (
    OriginQuestions,
    QuestionChannelClosed,
    QuestionClosed,
    QuestionError,
)
from cubicle.orchestrator.provider import AgentStream
from tests.orchestrator.support import Server, http_server
from tests.support.egress import RunningProxy, egress_proxy, statuses, upstream
from tests.support.listener import host_addresses

WAIT_S = 15.0
HOST = next(iter(host_addresses()), None)
REACH_HOST = ["--allow-internal", f"{HOST}/32"]
"""The proxy may reach HOST though it is (usually) a private address."""
REFUSED = b"refused by this sandbox's network policy"

pytestmark = pytest.mark.skipif(HOST is None, reason="the host has no non-loopback IPv4 address")


@contextmanager
def ask_proxy(allow: str = "", timeout: float = 60.0) -> Iterator[tuple[RunningProxy, Path]]:
    with tempfile.TemporaryDirectory() as folder:
        control = Path(folder) / "control.sock"
        options = ["--policy", f"ask:{allow}", "--ask-timeout", f"{timeout:g}"]
        with egress_proxy(options=[*options, *REACH_HOST, "--control", str(control)]) as proxy:
            yield proxy, control


def controller(control: Path) -> OriginQuestions:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(control))
    return OriginQuestions(AgentStream(sock, "test proxy"), "sandbox-under-test")


def get(path: str, server: Server) -> bytes:
    authority = f"{HOST}:{server.port}"
    head = f"GET http://{authority}{path} HTTP/1.1\r\nHost: {authority}\r\n"
    return (head + "Connection: close\r\n\r\n").encode()


def connect(server: Server) -> bytes:
    return f"CONNECT {HOST}:{server.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def test_approve_lets_the_held_request_through_and_is_remembered(
    pool: ThreadPoolExecutor,
) -> None:
    with (
        http_server("secret-page") as server,
        ask_proxy() as (proxy, control),
        controller(control) as questions,
    ):
        held: Future[bytes] = pool.submit(proxy.exchange, get("/first", server))
        question = questions.next(WAIT_S)
        assert question is not None
        assert (question.origin, question.host, question.port, question.method) == (
            f"http://{HOST}:{server.port}",
            HOST,
            server.port,
            "GET",
        )
        assert question.reason == "not in the allow list"
        assert question.approval_request() == {
            "type": "browser_origin_access",
            "origin": question.origin,
            "reason": "not in the allow list",
        }
        assert 59 < question.deadline - question.asked_at <= 60
        assert not held.done() and server.paths == []  # held: nothing reached the server
        questions.answer(question.id, "approve", by="alice")
        reply = held.result(WAIT_S)
        assert statuses(reply) == [200] and reply.endswith(b"secret-page"), reply
        again = proxy.exchange(get("/second", server))  # remembered: no new question
        assert statuses(again) == [200]
        assert server.paths == ["/first", "/second"]
        assert questions.next(0.2) is None and questions.pending() == []
        decided = questions.decisions()
        assert [(d.id, d.answer, d.by, d.approved) for d in decided] == [
            (question.id, "approve", "alice", True)
        ]
        lines = proxy.decisions(2)
        asked = proxy.events("question", 1)
        answered = proxy.events("answer", 1)
    assert [(d["decision"], d["reason"], d["by"]) for d in lines] == [
        ("allow", "approved by alice", "alice"),
        ("allow", "approved earlier by alice", "alice"),
    ]
    assert asked[0]["id"] == question.id and asked[0]["origin"] == question.origin
    assert (answered[0]["answer"], answered[0]["by"]) == ("approve", "alice")


def test_deny_refuses_a_tunnel_and_is_remembered(pool: ThreadPoolExecutor) -> None:
    with (
        http_server("never") as server,
        ask_proxy() as (proxy, control),
        controller(control) as questions,
    ):
        held = pool.submit(proxy.exchange, connect(server))
        question = questions.next(WAIT_S)
        assert question is not None and question.origin == f"https://{HOST}:{server.port}"
        questions.answer(question.id, "deny", by="bob")
        reply = held.result(WAIT_S)
        assert statuses(reply) == [403] and REFUSED in reply and b"bob" not in reply, reply
        again = proxy.exchange(connect(server))
        assert statuses(again) == [403] and REFUSED in again and b"bob" not in again
        assert questions.next(0.2) is None  # remembered: not asked again
        # a plain-http request to a denied origin gets a page saying why
        page = proxy.exchange(get("/x", server))
        lines = proxy.decisions(3)
    assert server.paths == []
    assert statuses(page) == [403] and b"text/html" in page and b"refused" in page, page
    # an origin is host:port, whatever the method: the GET was refused by the same answer
    assert [(d["decision"], d["method"], d["by"], d["reason"]) for d in lines] == [
        ("refuse", "CONNECT", "bob", "denied by bob"),
        ("refuse", "CONNECT", "bob", "denied earlier by bob"),
        ("refuse", "GET", "bob", "denied earlier by bob"),
    ]


def test_cancel_refuses_once_and_asks_again(pool: ThreadPoolExecutor) -> None:
    with (
        http_server("later") as server,
        ask_proxy() as (proxy, control),
        controller(control) as questions,
    ):
        first = pool.submit(proxy.exchange, get("/a", server))
        question = questions.next(WAIT_S)
        assert question is not None
        questions.answer(question.id, "cancel", by="carol")
        assert statuses(first.result(WAIT_S)) == [403]
        second = pool.submit(proxy.exchange, get("/b", server))
        asked_again = questions.next(WAIT_S)
        assert asked_again is not None and asked_again.id != question.id
        questions.answer(asked_again.id, "approve", by="carol")
        assert statuses(second.result(WAIT_S)) == [200]
    assert server.paths == ["/b"]


def test_no_answer_within_the_timeout_is_deny(pool: ThreadPoolExecutor) -> None:
    with (
        http_server("too-late") as server,
        ask_proxy(timeout=1.0) as (proxy, control),
        controller(control) as questions,
    ):
        started = time.monotonic()
        reply = proxy.exchange(get("/slow", server))  # held until the proxy gives up
        waited = time.monotonic() - started
        question = questions.next(WAIT_S)
        assert question is not None
        decision = questions.wait_decided(question.id, WAIT_S)
        with pytest.raises(QuestionClosed, match="already decided \\(timeout by timeout\\)"):
            questions.answer(question.id, "approve", by="late")
        lines = proxy.decisions(1)
    assert statuses(reply) == [403] and REFUSED in reply and b"answer" not in reply, reply
    assert lines[0]["reason"] == "no answer within 1 s"
    assert 0.9 <= waited < WAIT_S
    assert decision is not None and (decision.answer, decision.by) == ("timeout", "timeout")
    assert (lines[0]["decision"], lines[0]["by"]) == ("refuse", "timeout")
    assert server.paths == []


def test_concurrent_requests_share_one_question(pool: ThreadPoolExecutor) -> None:
    with (
        http_server("shared") as server,
        ask_proxy() as (proxy, control),
        controller(control) as questions,
        controller(control) as observer,  # a second controller sees the same questions
    ):
        held = [pool.submit(proxy.exchange, get(f"/{n}", server)) for n in range(3)]
        question = questions.next(WAIT_S)
        assert question is not None
        proxy.events("question", 1)
        seen_elsewhere = observer.next(WAIT_S)
        assert seen_elsewhere is not None and seen_elsewhere.id == question.id
        questions.answer(question.id, "approve", by="dave")
        replies = [future.result(WAIT_S) for future in held]
        with pytest.raises(QuestionClosed, match="already decided"):
            observer.answer(question.id, "deny", by="eve")  # the first answer won
        decision = observer.wait_decided(question.id, WAIT_S)
        assert len(proxy.events("question", 1)) == 1
    assert all(statuses(reply) == [200] for reply in replies), replies
    assert sorted(server.paths) == ["/0", "/1", "/2"]
    assert decision is not None and decision.by == "dave"


def test_allow_list_entries_pass_and_loopback_is_never_asked() -> None:
    with (
        http_server("listed") as listed,
        ask_proxy(allow=str(HOST)) as (proxy, control),
        controller(control) as questions,
    ):
        assert questions.policy == f"ask:{HOST}" and questions.timeout == 60
        # HOST without port admits 80/443 only: the listed server's port is asked about, so
        # check the list through a loopback literal instead: refused outright, never asked
        reply = proxy.exchange(
            b"GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert statuses(reply) == [403] and REFUSED in reply
        assert questions.next(0.3) is None
        assert proxy.decisions(1)[0]["reason"] == "127.0.0.1 is a loopback address; never asked"
    assert listed.paths == []
    with (
        http_server("listed") as listed,
        ask_proxy(allow=f"{HOST}:{listed.port}") as (proxy, control),
        controller(control) as questions,
    ):
        assert statuses(proxy.exchange(get("/ok", listed))) == [200]
        assert questions.next(0.3) is None
        assert proxy.decisions(1)[0]["by"] == "policy"
    assert listed.paths == ["/ok"]


def test_bad_answers_are_named_and_the_channel_ends_with_the_proxy(
    pool: ThreadPoolExecutor,
) -> None:
    with http_server("x") as server, ask_proxy() as (proxy, control):
        questions = controller(control)
        held = pool.submit(proxy.exchange, get("/y", server))
        question = questions.next(WAIT_S)
        assert question is not None
        with pytest.raises(QuestionError, match="answer must be one of"):
            questions.answer(question.id, "maybe", by="x")  # type: ignore[arg-type]
        with pytest.raises(QuestionError, match="'by' must name"):
            questions.answer(question.id, "approve", by=" ")
        with pytest.raises(QuestionClosed, match="no question 'q99'"):
            questions.answer("q99", "approve", by="x")
        assert [q.id for q in questions.pending()] == [question.id]
        late = controller(control)  # a controller that connects later is told what is pending
        assert late.pending() == [question]  # at once: its hello named it
        assert late.next(WAIT_S) == question
        late.close()
        proxy.stop()
        with pytest.raises(QuestionChannelClosed):
            questions.next(WAIT_S)
        assert list(questions) == []
        questions.close()
        held.result(WAIT_S)
    assert server.paths == []


def test_pending_is_whole_when_the_connection_opens_even_if_the_lines_come_apart() -> None:
    """``cubicle ask ID --list`` reads ``pending()`` right after connecting: the questions the
    hello announces are there even when their lines arrive in a later read (``docker exec``
    relays cut the stream anywhere); an older proxy's hello announces none."""
    question = {
        "type": "question",
        "id": "q7",
        "origin": "http://late.test",
        "host": "late.test",
        "port": 80,
        "method": "GET",
        "target": "http://late.test/",
        "client": "10.0.0.2:5000",
        "reason": "not in the allow list",
        "asked_at": 1.0,
        "deadline": 61.0,
    }
    for announced, expected in ((["q7"], ["q7"]), (None, [])):
        hello = {"type": "hello", "version": 1, "policy": "ask:", "timeout": 60}
        if announced is not None:
            hello["pending"] = announced
        ours, proxy_end = socket.socketpair()
        proxy_end.sendall(json.dumps(hello).encode() + b"\n")
        later = threading.Timer(0.5, proxy_end.sendall, [json.dumps(question).encode() + b"\n"])
        later.start()
        try:
            with OriginQuestions(AgentStream(ours, "split proxy"), "sandbox-under-test") as q:
                assert [item.id for item in q.pending()] == expected
        finally:
            later.cancel()  # the older proxy's case ends before the line is due
            later.join()
            proxy_end.close()


def test_a_guest_cannot_grow_the_proxys_memory_or_queue_without_bound() -> None:
    """In-process (the proxy's own Questions): at most MAX_PENDING origins wait at once (more
    are refused at once), and decided questions beyond MAX_QUESTIONS_KEPT are forgotten."""

    async def scenario() -> tuple[list[str], int, int, str | None]:
        questions = egress_questions.Questions(60.0, lambda record: None)
        policy = origins.parse_policy("ask:")

        def ask(n: int) -> asyncio.Future[origins.Decision]:
            info = egress_questions.RequestInfo(
                "10.0.0.2", "GET", f"h{n}.test", 80, f"http://h{n}.test/"
            )
            return asyncio.ensure_future(questions.ask(info, origins.decide(policy, info.host, 80)))

        held = [ask(n) for n in range(40)]
        await asyncio.sleep(0)  # one turn of the loop: each request reaches its question
        refused = [task.result().reason for task in held if task.done()]
        waiting = len(questions.pending)
        for question in list(questions.pending.values()):
            questions.answer(question.id, "cancel", "test")
        await asyncio.gather(*held)
        for n in range(40, 1500):  # a guest asking for new origins again and again
            task = ask(n)
            await asyncio.sleep(0)
            [question] = questions.pending.values()
            questions.answer(question.id, "cancel", "test")
            await task
        return refused, waiting, len(questions.by_id), questions.answer("q1", "approve", "x")

    refused, waiting, kept, late = asyncio.run(scenario())
    assert refused == [f"{egress_questions.MAX_PENDING} questions already wait for an answer"] * (
        40 - egress_questions.MAX_PENDING
    )
    assert waiting == egress_questions.MAX_PENDING
    assert kept <= egress_questions.MAX_QUESTIONS_KEPT + egress_questions.MAX_PENDING
    assert late == "no question 'q1'"


def test_block_and_ask_never_reach_the_proxys_own_loopback(pool: ThreadPoolExecutor) -> None:
    """The VM proxy is a host process: a block list (everything else allowed) or an approval
    must still not reach the host's loopback services — by IP literal or by a name resolving
    there — while a non-loopback service is reached."""
    with (
        upstream("host-loopback-service") as private,
        http_server("public-service") as public,
        egress_proxy(options=["--policy", "block:evil.test", *REACH_HOST]) as proxy,
    ):
        literal = proxy.exchange(
            f"GET http://127.0.0.1:{private.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        name = proxy.exchange(
            f"CONNECT localhost:{private.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        allowed = proxy.exchange(get("/public", public))
        lines = proxy.decisions(3)
    assert statuses(literal) == [403] and REFUSED in literal
    assert statuses(name) == [403] and REFUSED in name
    assert statuses(allowed) == [200]
    assert private.paths == [] and public.paths == ["/public"]
    assert [d["decision"] for d in lines] == ["refuse", "refuse", "allow"]
    assert "127.0.0.1 is a loopback address" in str(lines[0]["reason"])
    assert "localhost resolves to" in str(lines[1]["reason"])
    with (
        upstream("host-loopback-service") as private,
        ask_proxy() as (proxy, control),
        controller(control) as questions,
    ):
        head = f"CONNECT localhost:{private.port} HTTP/1.1\r\nHost: x\r\n\r\n"
        held = pool.submit(proxy.exchange, head.encode())
        question = questions.next(WAIT_S)
        assert question is not None
        questions.answer(question.id, "approve", by="someone")
        reply = held.result(WAIT_S)
        [line] = proxy.decisions(1)
    assert statuses(reply) == [403] and REFUSED in reply and b"someone" not in reply, reply
    assert str(line["reason"]).startswith("approved by someone; but localhost resolves")
    assert private.paths == []


def test_the_control_lines_round_trip_through_their_one_record() -> None:
    """Both ends of the control protocol read and write its ``question`` and ``decided`` lines
    through one record each (the proxy writes ``message()``, the host reads ``from_message``)."""
    question = egress_questions.QuestionRecord(
        "q1", "https://example.com", "example.com", 443, "CONNECT", "example.com:443",
        "10.0.0.2:5555", "not in the allow list", 1.5, 121.5,
    )  # fmt: skip
    decided = egress_questions.DecisionRecord(
        "q1", "https://example.com", "example.com", 443, "deny", "alice", 2.25
    )
    for record in (question, decided):
        line = json.loads(json.dumps(record.message()))
        assert type(record).from_message(line) == record
        del line["port"]
        with pytest.raises(KeyError, match="port"):
            type(record).from_message(line)
    assert decided.message()["type"] == "decided" and question.message()["type"] == "question"
