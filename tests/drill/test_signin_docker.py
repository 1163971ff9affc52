"""The shipped ``sign-in`` task in a Docker sandbox: the person's callback (the task's test
credentials, as the drill gives them) answers the password page and then the one-time-code page,
the model sees only the signed-in page, and no submitted value — nor its base64 or JSON-escaped
form — is anywhere in the trajectory folder (trajectory, report.html, screenshots), the guest's
log, the guest's app log or the requests sent to the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cubicle.orchestrator.drill.runner import run_drill
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.tasks import load_task
from cubicle.orchestrator.trajectory import read_trajectory
from tests.support.signin_site import secret_forms

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_sign_in_is_answered_by_the_person_and_no_value_is_kept(
    fresh_sandbox: Sandbox, tmp_path: Path
) -> None:
    task = load_task("sign-in")
    assert task.signin is not None and task.port is not None
    out = tmp_path / "out"
    result = run_drill(fresh_sandbox, task=task, loop="runner", out=out, keep_apps=True)
    assert result.ok, result.summary()

    events = read_trajectory(out)
    signins = [e for e in events if e["kind"] == "signin"]
    assert [e["stage"] for e in signins] == ["request", "submit", "request", "submit"]
    origin = f"http://127.0.0.1:{task.port}"
    first, second = signins[0]["request"], signins[2]["request"]
    assert first["credential_origin"] == second["credential_origin"] == origin
    assert [(f["id"], f["type"]) for f in first["fields"]] == [
        ("email", "email"),
        ("password", "password"),
    ]
    assert [(f["id"], f["type"]) for f in second["fields"]] == [("code", "text")]
    assert [e["note"] for e in signins if e["stage"] == "submit"] == [
        "2 fields submitted, values withheld",
        "1 field submitted, values withheld",
    ]
    # the model's first screenshot comes after both submissions
    first_shot = next(i for i, e in enumerate(events) if e["kind"] == "screenshot")
    assert first_shot > events.index(signins[-1])

    with fresh_sandbox.connect(timeout=30) as agent:
        home = agent.exec(["sh", "-c", "echo $HOME"]).result["stdout"].strip()
        apps_log = agent.read_file(f"{home}/.cubicle-task/apps.log").blob
        agent.browser_stop()
    places = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    places[Path("guest log")] = fresh_sandbox.logs(5000).encode()
    places[Path("guest apps.log")] = apps_log
    # every request the run sent to the model (the scripted model's received bodies)
    assert len(result.model_requests) >= 2
    places[Path("model requests")] = json.dumps(result.model_requests, ensure_ascii=False).encode()
    assert b"POST /signin" in apps_log and b"POST /code" in apps_log  # the site was reached
    assert any(p.name == "report.html" for p in places)
    for value in (task.signin.email, task.signin.password, task.signin.code):
        for form in (f.encode() for f in secret_forms(value)):
            leaks = [str(p) for p, data in places.items() if form in data]
            assert leaks == [], f"a submitted value ({form[:3]!r}…) is in {leaks}"
