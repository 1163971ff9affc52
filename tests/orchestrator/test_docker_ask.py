"""Domain rules, block lists and ask mode on real Docker sandboxes.

The "origin server" is a container of its own on Docker's default bridge (ports 80 and 443, the
ports domain rules admit), which only the egress proxy can reach: the guest sits on an internal
network. Names resolve through the proxy container's hosts file, which the test fills (the proxy
is the only resolver the guest has). Every assertion is on what the guest received and what the
origin server saw; questions are answered through the host-side API
(:class:`cubicle.orchestrator.origin_questions.OriginQuestions`), over the real control channel.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import docker
import docker.models.containers
import pytest

from cubicle.drivers.approvals import FilePolicy
from cubicle.drivers.policy_file import load_policy
from cubicle.drivers.scripted_model import ScriptedModel, Turn, parse_script
from cubicle.orchestrator import labels as L
from cubicle.orchestrator.origin_answers import run_answers
from cubicle.orchestrator.origin_questions import Answer, OriginQuestions
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.trajectory import read_trajectory
from tests.desktop.checks import click_launcher, colour_share, screenshot, wait_window, window_box
from tests.orchestrator.conftest import CliRun, Tracker
from tests.support.origin_server import GREEN, OriginServer, origin, resolve_in_proxy
from tests.support.runs import scripted_run

__all__ = ["origin"]

pytestmark = [pytest.mark.docker]

WAIT_S = 30.0
ASK_TIMEOUT_S = 8.0
"""Short, so that the timeout test waits no longer than it; answers are sent in milliseconds."""

GUEST_PROBE = r"""
import json, os, socket, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
results = {}
for item in sys.argv[1:]:
    method, target = item.split(" ", 1)
    sock = socket.create_connection((proxy.hostname, proxy.port), timeout=60)
    reader = sock.makefile("rb")
    if method == "CONNECT":  # then plain http inside the tunnel (the origin speaks no TLS)
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        status = reader.readline().decode()
        while reader.readline() not in (b"\r\n", b""):
            pass
        code = int(status.split()[1])
        if code != 200:
            results[item] = [code, reader.read().decode(errors="replace")]
            continue
        host = target.rsplit(":", 1)[0]
        sock.sendall(f"GET /tunnel HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    else:
        host = urllib.parse.urlsplit(target).netloc
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    reply = reader.read().decode(errors="replace")
    head, _, body = reply.partition("\r\n\r\n")
    results[item] = [int(head.split()[1]) if head else 0, body]
print(json.dumps(results))
"""


def probe(sandbox: Sandbox, *requests: str) -> dict[str, list[object]]:
    done = sandbox.exec(["python3", "-c", GUEST_PROBE, *requests], timeout=90)
    assert done.exit_code == 0, done.stderr
    result: dict[str, list[object]] = json.loads(done.stdout)
    return result


REFUSED = "refused by this sandbox's network policy"
"""All the guest learns of any refusal: a rule, a person or a timeout (the log says which)."""


def egress_lines(sandbox: Sandbox) -> list[dict[str, object]]:
    log = sandbox.provider.egress_log(sandbox.id)
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def test_allowed_domains_admit_subdomains_on_80_and_443_only(
    sandboxes: Tracker, engine: docker.DockerClient, origin: OriginServer
) -> None:
    sandbox = sandboxes.create(network=origin.policy("allow:example.test"))
    resolve_in_proxy(engine, sandbox.id, origin)
    seen = probe(
        sandbox,
        "GET http://example.test/apex",
        "GET http://www.example.test/www",
        "CONNECT deep.sub.example.test:443",
        "GET http://www.example.test:8080/port",
        "GET http://badexample.test/suffix",
        "GET http://other.test/other",
        "CONNECT other.test:443",
        "GET http://loop.example.test/loopback",
    )
    assert seen["GET http://example.test/apex"][0] == 200
    assert seen["GET http://www.example.test/www"][0] == 200
    assert seen["CONNECT deep.sub.example.test:443"] == [
        200,
        "<html><head><title>origin deep.sub.example.test</title></head>"
        "<body style='margin:0;background:#12c48b'><h1>origin deep.sub.example.test</h1>"
        "</body></html>",
    ]
    for refused in ("www.example.test:8080/port", "badexample.test/suffix", "other.test/other"):
        assert seen[f"GET http://{refused}"][0] == 403, (refused, seen)
    assert seen["CONNECT other.test:443"][0] == 403
    loop = seen["GET http://loop.example.test/loopback"]
    # the guest learns only that the policy refused; the log says why (AQ3)
    assert loop[0] == 403 and REFUSED in str(loop[1]) and "127.0.0.1" not in str(loop[1])
    [why] = [x["reason"] for x in egress_lines(sandbox) if x.get("host") == "loop.example.test"]
    assert "resolves to 127.0.0.1" in str(why) and "loopback" in str(why)
    assert origin.seen() == [
        ("example.test", 80, "/apex"),
        ("www.example.test", 80, "/www"),
        ("deep.sub.example.test", 443, "/tunnel"),
    ]
    decisions = [line for line in egress_lines(sandbox) if "decision" in line]
    assert [(d["host"], d["decision"]) for d in decisions] == [
        ("example.test", "allow"),
        ("www.example.test", "allow"),
        ("deep.sub.example.test", "allow"),
        ("www.example.test", "refuse"),
        ("badexample.test", "refuse"),
        ("other.test", "refuse"),
        ("other.test", "refuse"),
        ("loop.example.test", "refuse"),
    ]
    assert decisions[1]["reason"] == "allowed domain example.test"


def test_blocked_domains_refuse_them_and_their_subdomains_only(
    sandboxes: Tracker, engine: docker.DockerClient, origin: OriginServer
) -> None:
    sandbox = sandboxes.create(network=origin.policy("block:blocked.test"))
    resolve_in_proxy(engine, sandbox.id, origin)
    seen = probe(
        sandbox,
        "GET http://other.test/free",
        "CONNECT other.test:443",
        "GET http://blocked.test/no",
        "GET http://sub.blocked.test/no",
        "CONNECT blocked.test:443",
        "GET http://loop.example.test/loopback",
    )
    assert seen["GET http://other.test/free"][0] == 200
    assert seen["CONNECT other.test:443"][0] == 200
    for refused in ("GET http://blocked.test/no", "GET http://sub.blocked.test/no"):
        assert seen[refused][0] == 403 and REFUSED in str(seen[refused][1])
    assert seen["CONNECT blocked.test:443"][0] == 403
    assert seen["GET http://loop.example.test/loopback"][0] == 403  # no way to the loopback
    assert origin.seen() == [("other.test", 80, "/free"), ("other.test", 443, "/tunnel")]


def test_ask_mode_approve_deny_and_timeout_from_the_guest(
    sandboxes: Tracker, engine: docker.DockerClient, origin: OriginServer
) -> None:
    sandbox = sandboxes.create(network=origin.policy("ask:example.test", ask_timeout=ASK_TIMEOUT_S))
    resolve_in_proxy(engine, sandbox.id, origin)
    with ThreadPoolExecutor(2) as pool, OriginQuestions.open(sandbox) as questions:
        assert (questions.policy, questions.timeout) == ("ask:example.test", ASK_TIMEOUT_S)
        # listed: no question
        listed = "GET http://www.example.test/listed"
        assert probe(sandbox, listed)[listed][0] == 200
        assert questions.pending() == []

        asked: Future[dict[str, list[object]]] = pool.submit(
            probe, sandbox, "GET http://asked.test/approved"
        )
        question = questions.next(WAIT_S)
        assert question is not None and question.origin == "http://asked.test"
        assert ("asked.test", 80, "/approved") not in origin.seen()  # held, not forwarded
        questions.answer(question.id, "approve", by="test approver")
        assert asked.result(WAIT_S)["GET http://asked.test/approved"][0] == 200
        # remembered for the sandbox: a second request goes through without a question
        again = probe(sandbox, "GET http://asked.test/again")
        assert again["GET http://asked.test/again"][0] == 200

        denied = pool.submit(probe, sandbox, "CONNECT denied.test:443")
        question = questions.next(WAIT_S)
        assert question is not None and question.origin == "https://denied.test"
        questions.answer(question.id, "deny", by="test denier")
        refused = denied.result(WAIT_S)["CONNECT denied.test:443"]
        assert refused[0] == 403 and REFUSED in str(refused[1])
        assert "test denier" not in str(refused[1])  # who refused stays in the log

        late = pool.submit(probe, sandbox, "GET http://late.test/unanswered")
        question = questions.next(WAIT_S)
        assert question is not None
        page = late.result(WAIT_S + ASK_TIMEOUT_S)["GET http://late.test/unanswered"]
        decision = questions.wait_decided(question.id, WAIT_S)
    assert page[0] == 403 and "no answer" not in str(page[1])
    assert "<title>Access to late.test refused</title>" in str(page[1])
    assert decision is not None and (decision.answer, decision.by) == ("timeout", "timeout")
    assert origin.seen() == [
        ("www.example.test", 80, "/listed"),
        ("asked.test", 80, "/approved"),
        ("asked.test", 80, "/again"),
    ]
    lines = egress_lines(sandbox)
    answers = [(x["host"], x["answer"], x["by"]) for x in lines if x.get("event") == "answer"]
    assert answers == [
        ("asked.test", "approve", "test approver"),
        ("denied.test", "deny", "test denier"),
        ("late.test", "timeout", "timeout"),
    ]
    decisions = [(x["host"], x["decision"], x["by"]) for x in lines if "decision" in x]
    assert decisions == [
        ("www.example.test", "allow", "policy"),
        ("asked.test", "allow", "test approver"),
        ("asked.test", "allow", "test approver"),
        ("denied.test", "refuse", "test denier"),
        ("late.test", "refuse", "timeout"),
    ]


def test_the_guest_cannot_reach_or_forge_the_control_channel(
    sandboxes: Tracker, engine: docker.DockerClient, origin: OriginServer
) -> None:
    sandbox = sandboxes.create(network=origin.policy("ask:", ask_timeout=ASK_TIMEOUT_S))
    resolve_in_proxy(engine, sandbox.id, origin)
    forge = r"""
import json, os, socket, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
out = {"socket_visible": os.path.exists("/run/egress/control.sock")}
line = json.dumps({"op": "answer", "ref": 1, "id": "q1", "answer": "approve", "by": "guest"})
with socket.create_connection((proxy.hostname, proxy.port), timeout=30) as sock:
    sock.sendall(line.encode() + b"\n\n")
    out["reply"] = sock.recv(200).decode(errors="replace").split("\r\n")[0]
print(json.dumps(out))
"""
    with ThreadPoolExecutor(1) as pool, OriginQuestions.open(sandbox) as questions:
        held = pool.submit(probe, sandbox, "GET http://asked.test/held")
        question = questions.next(WAIT_S)
        assert question is not None and question.id == "q1"
        done = sandbox.exec(["python3", "-c", forge], timeout=60)
        forged = json.loads(done.stdout)
        assert forged == {"socket_visible": False, "reply": "HTTP/1.1 400 "}, forged
        assert [q.id for q in questions.pending()] == ["q1"]  # still waiting for a person
        questions.answer("q1", "cancel", by="test")
        assert held.result(WAIT_S)["GET http://asked.test/held"][0] == 403
    assert origin.seen() == []


POLICY_FILE = """\
version = 1
default = "allow"
safety_checks = "deny"
origin_access = "ask"

[[origin]]
decision = "allow"
origins = ["asked.test"]
note = "the task needs it"

[[origin]]
decision = "deny"
origins = ["denied.test"]
"""


def test_run_answers_by_policy_file_and_the_report_shows_every_decision(
    sandboxes: Tracker, engine: docker.DockerClient, origin: OriginServer, tmp_path: Path
) -> None:
    """``cubicle run``'s pipeline (run_task + the scripted model): while the model's first turn
    is pending, the guest asks for three origins; the policy file approves one, denies one, and
    the third has no rule and no terminal to ask: deny."""
    network = origin.policy("ask:example.test", ask_timeout=ASK_TIMEOUT_S)
    sandbox = sandboxes.create(network=network)
    resolve_in_proxy(engine, sandbox.id, origin)
    policy_path = tmp_path / "policy.toml"
    policy_path.write_text(POLICY_FILE)
    approvals = FilePolicy(load_policy(policy_path))
    requests = (
        "GET http://asked.test/by-policy",
        "CONNECT denied.test:443",
        "GET http://other.test/",
    )
    seen: dict[str, list[object]] = {}

    def on_turn(index: int, turn: Turn, body: dict[str, object]) -> None:
        if index == 1:  # the guest browses while the model thinks
            seen.update(probe(sandbox, *requests))

    script = parse_script(
        {
            "name": "browse",
            "turns": [
                {"computer_call": {"actions": [{"type": "wait"}]}},
                {"message": "done"},
            ],
        }
    )
    out = tmp_path / "run"
    with ScriptedModel(script, on_turn=on_turn) as model:
        result = scripted_run(
            sandbox,
            model,
            prompt="browse",
            out=out,
            safety_policy=approvals,
            action_policy=approvals,
            origin_answers=run_answers(sandbox, network, approvals),
        )
    assert result.ok, result.error
    assert [seen[r][0] for r in requests] == [200, 403, 403], seen
    assert origin.seen() == [("asked.test", 80, "/by-policy")]
    events = [e for e in read_trajectory(out) if e["kind"] == "origin_access"]
    decided = [(e["host"], e["answer"], e["by"]) for e in events]
    assert decided == [
        ("asked.test", "approve", f"policy {policy_path} origin 1 (line 6): the task needs it"),
        ("denied.test", "deny", f"policy {policy_path} origin 2 (line 11)"),
        (
            "other.test",
            "deny",
            f"policy {policy_path} origin_access default -> cubicle run (no terminal to ask; "
            "default deny)",
        ),
    ]
    report = (out / "report.html").read_text()
    assert '<table id="origin-access">' in report
    for host, answer, _by in decided:
        assert f"{host}" in report and f">{answer}</td>" in report


def test_cli_up_ask_and_cubicle_ask_answer_a_held_request(
    sandboxes: Tracker, engine: docker.DockerClient, origin: OriginServer, cli: CliRun
) -> None:
    """``cubicle up --network ask: --ask-timeout``, then ``cubicle ask ID --list`` shows the held
    request and ``cubicle ask ID --approve q1`` lets it through; bad input is named."""
    bad = cli("up", "--network", "allow:a.test", "--ask-timeout", "5")
    assert bad.returncode != 0 and "--ask-timeout applies to --network ask:" in bad.stderr
    bad = cli("up", "--network", "allow:a.test,block:b.test")
    assert bad.returncode != 0 and "cannot be combined" in bad.stderr
    up = cli("up", "--network", "ask:", "--ask-timeout", "60", "--allow-internal", origin.subnet)
    assert up.returncode == 0, up.stderr
    sandbox = Sandbox.attach(sandboxes.add(up.stdout.strip()))
    resolve_in_proxy(engine, sandbox.id, origin)
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(probe, sandbox, "GET http://asked.test/cli")
        with OriginQuestions.open(sandbox) as watcher:  # only to know when it is asked
            assert watcher.timeout == 60
            assert watcher.next(WAIT_S) is not None
            listed = cli("ask", sandbox.id, "--list")
            assert listed.returncode == 0, listed.stderr
            pending = [json.loads(line) for line in listed.stdout.splitlines()]
            assert [(q["id"], q["origin"]) for q in pending] == [("q1", "http://asked.test")]
            approved = cli("ask", sandbox.id, "--approve", "q1", "--by", "cli tester")
            assert approved.returncode == 0 and approved.stdout.strip() == "q1: approve"
            assert held.result(WAIT_S)["GET http://asked.test/cli"][0] == 200
            again = cli("ask", sandbox.id, "--deny", "q1")
            assert again.returncode != 0 and "already decided (approve by cli tester)" in (
                again.stderr
            )
    assert origin.seen() == [("asked.test", 80, "/cli")]
    logs = cli("logs", sandbox.id)
    assert '"event": "answer"' in logs.stdout and '"by": "cli tester"' in logs.stdout


def test_the_guest_browser_waits_for_the_answer_and_shows_what_it_allowed(
    sandboxes: Tracker, engine: docker.DockerClient, origin: OriginServer
) -> None:
    """Chromium in the guest (launched from the panel, as a model would) opens a page whose
    origin a person approves — the page (green) is on the next screenshot — then one a person
    denies: the origin server never sees it and no green is drawn."""
    sandbox = sandboxes.create(network=origin.policy("ask:", ask_timeout=60))
    resolve_in_proxy(engine, sandbox.id, origin)
    answered: list[tuple[str, str]] = []

    def answer_for(host: str, answer: Answer, questions: OriginQuestions) -> None:
        """Answer questions about ``host`` with ``answer`` until its http origin is answered
        (Chromium may try https first). No other host is asked about: the browser makes no
        requests of its own, not even search suggestions for the typed address
        (images/desktop/chromium-policy.json; tests/attack/test_browser_background.py)."""
        while True:
            question = questions.next(WAIT_S)
            assert question is not None, f"no question for {host}; answered {answered}"
            assert question.host == host, (question.origin, answered)
            questions.answer(question.id, answer, by="browser test")
            answered.append((question.origin, answer))
            if question.origin == f"http://{host}":
                return

    with sandbox.connect() as client, OriginQuestions.open(sandbox) as questions:
        client.hello()
        click_launcher(client, "browser")
        window = wait_window(client, "Chromium", 60)
        box = window_box(window)
        for host, answer in (("asked.test", "approve"), ("denied.test", "deny")):
            # settled as the driver does by default: typing must not start before the
            # address bar has the focus (a lost first letter makes the URL a search)
            focus = {"expect_ms": 300, "quiet_ms": 400}
            client.keypress(["CTRL", "L"], settle=focus, timeout=30)
            client.type(f"http://{host}/page", timeout=30)
            client.keypress(["Return"], timeout=30)
            try:
                answer_for(host, answer, questions)  # type: ignore[arg-type]
            except AssertionError:
                screenshot(client).save(f"/tmp/wt18-browser-{host}.png")
                raise
            client.settle(quiet_ms=800, timeout_ms=20_000, timeout=60)
            shot = screenshot(client)
            share = colour_share(shot, box, {GREEN})
            if host == "asked.test":
                assert share > 0.5, (share, answered)
            else:
                assert share < 0.01, (share, answered)
    paths = [(h, p) for h, _port, p in origin.seen()]
    assert ("asked.test", "/page") in paths
    assert all(h == "asked.test" for h, _ in paths), paths


def test_cubicle_run_without_a_terminal_denies_and_reports_it(
    sandboxes: Tracker, engine: docker.DockerClient, origin: OriginServer, tmp_path: Path
) -> None:
    """The real ``cubicle run --network ask:`` (stdin not a terminal, no policy file): while the
    model's first turn is pending the guest asks for an origin; the answer is deny, signed by
    the run, and the trajectory and report say so."""
    seen: dict[str, list[object]] = {}
    started: list[subprocess.Popen[str]] = []

    def on_turn(index: int, turn: Turn, body: dict[str, object]) -> None:
        if index != 1:
            return
        mine: dict[str, str | list[str] | bool] = {
            "label": [f"{L.OWNER_PID}={started[0].pid}", f"{L.ROLE}=guest"]
        }
        [guest] = engine.containers.list(filters=mine)
        sandbox = Sandbox.attach(sandboxes.add(guest.labels[L.SANDBOX]))
        resolve_in_proxy(engine, sandbox.id, origin)
        seen.update(probe(sandbox, "GET http://other.test/run"))

    script = parse_script(
        {
            "name": "run-ask",
            "turns": [{"computer_call": {"actions": [{"type": "wait"}]}}, {"message": "done"}],
        }
    )
    out = tmp_path / "out"
    with ScriptedModel(script, on_turn=on_turn) as model:
        env = {**os.environ, "OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "offline"}
        argv = ["run", "browse", "--network", "ask:example.test", "--ask-timeout", "30"]
        process = subprocess.Popen(
            [sys.executable, "-m", "cubicle.orchestrator.cli", *argv, "--out", str(out)],
            cwd=Path(__file__).resolve().parents[2],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    assert "done" in stdout
    page = seen["GET http://other.test/run"]
    by = "cubicle run (no terminal to ask; default deny)"
    assert page[0] == 403 and REFUSED in str(page[1]) and by not in str(page[1]), page
    assert origin.seen() == []
    events = [e for e in read_trajectory(out) if e["kind"] == "origin_access"]
    assert [(e["origin"], e["answer"], e["by"]) for e in events] == [
        ("http://other.test", "deny", by)
    ]
    assert f"<td>{by}</td>" in (out / "report.html").read_text()


def test_cubicle_ask_on_a_terminal_approves_with_y(
    sandboxes: Tracker, engine: docker.DockerClient, origin: OriginServer
) -> None:
    """``cubicle ask ID`` on a (pseudo-)terminal prints each question and ``y`` approves it;
    Ctrl-C stops it even when it inherited SIGINT ignored (a background job of a
    non-interactive shell, as CI runners start things)."""
    sandbox = sandboxes.create(network=origin.policy("ask:", ask_timeout=60))
    resolve_in_proxy(engine, sandbox.id, origin)
    main, side = pty.openpty()
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child starts with it ignored
    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cubicle.orchestrator.cli",
                "ask",
                sandbox.id,
                "--by",
                "pty tester",
            ],
            cwd=Path(__file__).resolve().parents[2],
            stdin=side,
            stdout=subprocess.PIPE,
            stderr=side,
            text=True,
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    os.close(side)
    try:
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(probe, sandbox, "GET http://asked.test/pty")
            shown = b""
            deadline = time.monotonic() + WAIT_S
            while b"[y/N] " not in shown:
                assert time.monotonic() < deadline, shown
                if select.select([main], [], [], 1.0)[0]:
                    shown += os.read(main, 4096)
            os.write(main, b"y\n")
            reply = held.result(WAIT_S)["GET http://asked.test/pty"]
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()  # the test's own child, by its pid
                process.communicate()
            os.close(main)
    assert process.returncode == 130, "Ctrl-C did not stop cubicle ask"
    assert b"The guest wants to reach http://asked.test (GET http://asked.test/pty)" in shown
    assert reply[0] == 200
    assert origin.seen() == [("asked.test", 80, "/pty")]
    answers = [x for x in egress_lines(sandbox) if x.get("event") == "answer"]
    assert [(a["answer"], a["by"]) for a in answers] == [
        ("approve", "pty tester: approved at the prompt")
    ]
