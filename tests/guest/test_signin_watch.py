"""A run's sign-in (cubicle.orchestrator.modelrun.signin) against the real agent and Chromium.

The watch asks the person (a callback, as the Python API takes it) for each form the agent's
browser shows — a password page, then a one-time-code page — fills them, and records only counts:
the values, their base64 and JSON-escaped forms, appear nowhere in the trajectory or the agent's
log. No person (no callback) cancels; a cancelled form is not asked again. The answer rules of
the product hold, each error naming its rule and no value.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cubicle.orchestrator.modelrun.signin import (
    MAX_VALUE_CHARS,
    SigninAnswer,
    SigninAnswerError,
    SigninField,
    SigninOption,
    SigninRequest,
    SigninWatch,
    check_answer,
    terminal_callback,
)
from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder
from cubicle_guest.client import AgentClient
from tests.support.agent import RunningAgent, start_agent
from tests.support.signin_site import Site, browser_argv, secret_forms, until
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11

EMAIL, PASSWORD, CODE = "ann@example.test", 'Tr0ub4dor&"3', "481516"

LOGIN = """<!doctype html><title>Mail</title><form method=post action=/password>
<label>Email <input type=email name=email autocomplete=username required></label>
<label>Password <input type=password name=password></label><button>Sign in</button></form>"""
CODE_PAGE = """<!doctype html><title>Verify</title><form method=post action=/code>
<label>Code sent to {email}<input name=otp autocomplete=one-time-code></label>
<button>Verify</button></form>"""
INBOX = "<!doctype html><title>Inbox</title>signed in"


@pytest.fixture
def site() -> Iterator[Site]:
    served = Site()
    served.pages["/login"] = LOGIN
    served.responses["/password"] = lambda form: CODE_PAGE.format(email=form.get("email", ""))
    served.responses["/code"] = lambda _form: INBOX
    try:
        yield served
    finally:
        served.close()


@pytest.fixture
def desktop(
    xserver: Xvfb, tmp_path_factory: pytest.TempPathFactory, site: Site
) -> Iterator[tuple[RunningAgent, AgentClient]]:
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed")
    profile = tempfile.mkdtemp(prefix="cubicle-signin-watch-")
    try:
        with (
            start_agent(xserver.display, tmp_path_factory.mktemp("agent")) as agent,
            agent.client() as client,
        ):
            client.browser_start(argv=browser_argv(profile, headless=False), url=site.url("/login"))
            until(lambda: client.signin_find().result["form"], "the sign-in form")
            yield agent, client
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_successive_forms_are_answered_by_the_person_and_recorded_without_values(
    desktop: tuple[RunningAgent, AgentClient], site: Site, tmp_path: Path
) -> None:
    agent, client = desktop
    asked: list[SigninRequest] = []

    def person(request: SigninRequest) -> SigninAnswer:
        asked.append(request)
        if request.fields[0].id == "code":
            return SigninAnswer.submit({"code": CODE})
        return SigninAnswer.submit({"email": EMAIL, "password": PASSWORD})

    with TrajectoryRecorder(tmp_path / "out") as recorder:
        watch = SigninWatch(client, person, recorder)
        watch.check()
    assert [r.credential_origin for r in asked] == [site.url("")] * 2
    assert [[f.id for f in r.fields] for r in asked] == [["email", "password"], ["code"]]
    assert asked[1].fields[0].label == "Code sent to [withheld]"  # the page echoed the email
    assert site.posted == [
        ("/password", {"email": EMAIL, "password": PASSWORD}),
        ("/code", {"otp": CODE}),
    ]
    assert watch.submitted == 2

    records = [
        json.loads(line)
        for line in (tmp_path / "out" / "trajectory.jsonl").read_text().split("\n")
        if line
    ]
    submits = [r for r in records if r.get("kind") == "signin" and r.get("stage") == "submit"]
    assert [s["note"] for s in submits] == [
        "2 fields submitted, values withheld",
        "1 field submitted, values withheld",
    ]
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*.json*"))
    written += agent.log_text()
    for value in (EMAIL, PASSWORD, CODE):
        for form in secret_forms(value):
            assert form not in written, f"a form of a submitted value leaked: {form!r}"


def test_no_person_cancels_and_a_cancelled_form_is_not_asked_again(
    desktop: tuple[RunningAgent, AgentClient], site: Site, tmp_path: Path
) -> None:
    _agent, client = desktop
    with TrajectoryRecorder(tmp_path / "out") as recorder:
        watch = SigninWatch(client, None, recorder)
        watch.check()
        watch.check()
        asked: list[SigninRequest] = []

        def person(request: SigninRequest) -> SigninAnswer:
            asked.append(request)
            return SigninAnswer.cancel()

        other = SigninWatch(client, person, recorder)
        other.check()
        other.check()
    assert site.posted == []
    assert len(asked) == 1
    text = (tmp_path / "out" / "trajectory.jsonl").read_text()
    assert text.count('"stage": "cancel"') + text.count('"stage":"cancel"') == 2
    assert "an approval policy never answers a sign-in" in text


REQUEST = SigninRequest(
    reason="Sign in",
    credential_origin="http://127.0.0.1:1",
    fields=(
        SigninField("email", "Email", "email", True),
        SigninField("password", "Password", "password", True),
        SigninField("email_2", "Email", "email", False),
    ),
    options=(
        SigninOption("password", "Use a password", ("email", "password")),
        SigninOption("code", "Email me a code", ("email_2",)),
    ),
)


@pytest.mark.parametrize(
    ("answer", "rule"),
    [
        (
            SigninAnswer("submit", tuple((f"f{i}", f"value-{i}") for i in range(7)), "password"),
            "max_values",
        ),
        (
            SigninAnswer("submit", (("email", "aa-secret"), ("email", "bb-secret")), "password"),
            "duplicate_field",
        ),
        (
            SigninAnswer("submit", (("email", "x" * (MAX_VALUE_CHARS + 1)),), "password"),
            "value_length",
        ),
        (
            SigninAnswer(
                "submit", tuple((f"f{i}", "\u00e9" * 16_000) for i in range(6)), "password"
            ),
            "payload_size",
        ),
        (SigninAnswer.submit({"email": "aa-secret", "password": "bb-secret"}), "option"),
        (SigninAnswer.submit({"email": "aa-secret"}, "sms"), "option"),
        (SigninAnswer.submit({"email_2": "aa-secret"}, "password"), "unknown_field"),
        (SigninAnswer.submit({"email": "aa-secret", "password": ""}, "password"), "required"),
        (SigninAnswer.submit({}, "password"), "empty"),
        (SigninAnswer("cancel", (("email", "aa-secret"),)), "cancel"),
    ],
)
def test_answers_breaking_a_rule_are_refused_naming_it(answer: SigninAnswer, rule: str) -> None:
    with pytest.raises(SigninAnswerError) as refused:
        check_answer(REQUEST, answer)
    assert refused.value.rule == rule
    for _field_id, value in answer.fields:
        if value:
            assert value not in str(refused.value)
    assert "fields" not in repr(answer)  # an answer's repr shows no value


def test_good_answers_pass_the_rules() -> None:
    check_answer(REQUEST, SigninAnswer.submit({"email": "a", "password": "b"}, "password"))
    check_answer(REQUEST, SigninAnswer.submit({"email_2": "x"}, "code"))
    check_answer(REQUEST, SigninAnswer.cancel())


def test_the_terminal_reads_values_without_echo() -> None:
    """``cubicle run``'s person: values come from the no-echo reader, never the echoing one."""
    secret_prompts: list[str] = []
    lines = iter(["y", "1"])
    secrets = iter(["ann@example.test", "pw"])

    def read_secret(prompt: str) -> str:
        secret_prompts.append(prompt)
        return next(secrets)

    with tempfile.TemporaryFile("w+") as out:
        ask = terminal_callback(read_secret, lambda _prompt: next(lines), out)
        answer = ask(REQUEST)
        declined = terminal_callback(read_secret, lambda _prompt: "", out)(REQUEST)
        out.seek(0)
        shown = out.read()
    assert answer == SigninAnswer.submit(
        {"email": "ann@example.test", "password": "pw"}, "password"
    )
    assert secret_prompts == ["Email: ", "Password: "]
    assert "http://127.0.0.1:1" in shown and "pw" not in shown
    assert declined == SigninAnswer.cancel()
