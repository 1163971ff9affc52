"""The console in headless Chromium: it lists the session, shows a new event within 2 s, loads
the latest screenshot, and approving from the page lets the turn go on; a pending function call
is answered from the page."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from playwright.sync_api import Browser, sync_playwright

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator import labels as L
from cubicle.orchestrator.tasks import load_task
from tests.orchestrator.support import leftovers
from tests.serve.conftest import (
    TOKEN,
    Server,
    engine,
    module_server,
    no_session_left,
    start_server,
)
from tests.serve.support import ASK_TOOL, DRILL_ENV, assert_turn_went_through, turn_in_thread
from tests.support.pages import CHROMIUM, assert_no_csp_violations, new_context

__all__ = ["engine", "module_server", "no_session_left"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def server(module_server: Server, no_session_left: None) -> Server:
    """The module's one server: every test here deletes its sessions (checked after each)."""
    return module_server


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser
        browser.close()


def test_console_lists_streams_shows_screenshot_and_approves(
    server: Server, engine: docker.DockerClient, browser: Browser
) -> None:
    client = server.client()
    session = client.beta.agents.sessions.create(
        environment=DRILL_ENV, agent={"model": "cubicle-drill"}
    )
    context = new_context(browser)  # the console's CSP enforced, as in a person's browser
    page = context.new_page()
    page.goto(f"{server.origin}/console#token={TOKEN}")
    assert TOKEN not in page.url  # the fragment is dropped from the address bar
    # the style sheet is a file of the server (no inline style): it applied
    assert page.evaluate("getComputedStyle(document.getElementById('left')).width") == "280px"
    row = page.locator(f'.session[data-id="{session.id}"]')
    row.wait_for(timeout=10_000)
    row.click()
    page.locator(".event").first.wait_for(timeout=10_000)  # the kept events

    submitted = threading.Event()
    with turn_in_thread(client, session.id, "Run the drill.", streaming=submitted) as (
        outcome,
        worker,
    ):
        assert submitted.wait(60)
        page.locator(".event", has_text="agent.session.turn.created").wait_for(timeout=2_000)
        approve = page.locator('.action button[data-decision="approve"]')
        approve.wait_for(timeout=180_000)
        page.wait_for_function("document.getElementById('shot').naturalWidth > 0", timeout=10_000)
        assert page.evaluate("document.getElementById('shot').naturalWidth") == 1024
        page.click("#view")  # the desktop's live view (cubicle view), one-time link
        link = page.locator("#viewlink[href]")
        link.wait_for(timeout=30_000)
        assert (link.get_attribute("href") or "").startswith("http://127.0.0.1:")
        assert "#t=" in (link.get_attribute("href") or "")
        # the link opens the desktop, its CSP enforced: the canvas paints the guest's screen
        view = context.new_page()
        view.goto(link.get_attribute("href") or "")
        view.wait_for_function(
            "() => window.cubicleView && window.cubicleView.connected", timeout=30_000
        )
        view.wait_for_function(
            "() => { const c = document.querySelector('#screen canvas');"
            " return c && c.getContext('2d').getImageData(10, 10, 1, 1).data[3] > 0; }",
            timeout=30_000,
        )
        assert_no_csp_violations(view)
        view.close()
        approve.click()
        worker.join(180)
    assert_turn_went_through(outcome)  # the approval from the page let the loop go on
    page.locator(
        ".event", has_text=re.compile(r"agent\.session\.turn\.(completed|failed)")
    ).wait_for(timeout=5_000)
    # without the token the page shows nothing of the sessions
    assert_no_csp_violations(page)
    other = new_context(browser).new_page()
    other.goto(f"{server.origin}/console")
    other.wait_for_timeout(500)
    assert other.locator(".session").count() == 0
    assert_no_csp_violations(other)
    other.context.close()
    context.close()
    client.beta.agents.sessions.delete(session.id)


def test_console_answers_a_function_call(
    docker_image: str, engine: docker.DockerClient, browser: Browser, tmp_path: Path
) -> None:
    script = {
        "name": "ask",
        "turns": [
            {"function_call": {"name": "request_user_response", "arguments": {"question": "?"}}},
            {"message": "The user answered: {TOOL_OUTPUT}"},
        ],
    }
    with ScriptedModel(parse_script(script)) as model:
        server = start_server(
            tmp_path / "serve",
            env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model.base_url},
        )
        try:
            client = server.client()
            session = client.beta.agents.sessions.create(
                environment=DRILL_ENV, agent={"model": "gpt-test", "tools": [ASK_TOOL]}
            )
            context = new_context(browser)
            page = context.new_page()
            page.goto(f"{server.origin}/console#token={TOKEN}")
            page.locator(f'.session[data-id="{session.id}"]').click(timeout=10_000)
            with turn_in_thread(client, session.id, "Ask.") as (outcome, worker):
                action = page.locator(".action", has_text="Function call request_user_response")
                action.locator("input").fill("teal", timeout=120_000)
                action.locator("button", has_text="answer").click()
                worker.join(120)
            texts = [e.text for e in outcome if e.type == "agent.session.turn.output_text.done"]
            assert texts == ["The user answered: teal"]
            assert_no_csp_violations(page)
            context.close()
            client.beta.agents.sessions.delete(session.id)
        finally:
            server.stop()
        assert leftovers(engine, {L.OWNER_PID: str(server.process.pid)}) == []


def test_console_signs_in_with_masked_fields_and_keeps_no_value(
    server: Server, browser: Browser
) -> None:
    """``cubicle-task:sign-in`` from the console: the destination shown, every field masked, the
    values sent only in the answer and gone from the page afterwards; the task's check passes."""
    task = load_task("sign-in")
    assert task.signin is not None
    values = {
        "email": task.signin.email,
        "password": task.signin.password,
        "code": task.signin.code,
    }
    client = server.client()
    session = client.beta.agents.sessions.create(
        environment=DRILL_ENV, agent={"model": "cubicle-task:sign-in"}
    )
    context = new_context(browser)
    page = context.new_page()
    page.goto(f"{server.origin}/console#token={TOKEN}")
    page.locator(f'.session[data-id="{session.id}"]').click(timeout=10_000)
    with turn_in_thread(client, session.id, "Sign in.") as (outcome, worker):
        for fields in (("email", "password"), ("code",)):
            form = page.locator(".signin", has=page.locator(f'input[data-field="{fields[0]}"]'))
            form.wait_for(timeout=120_000)
            assert f"http://127.0.0.1:{task.port}" in form.inner_text()
            for field in fields:
                box = form.locator(f'input[data-field="{field}"]')
                assert box.get_attribute("type") == "password"
                box.fill(values[field])
            form.locator("button", has_text="sign in").click()
            form.wait_for(state="detached", timeout=30_000)
        worker.join(120)
    assert_turn_went_through(outcome)  # the site reached its signed-in page
    typed = "() => [...document.querySelectorAll('input')].map(i => i.value).join(' ')"
    shown = page.content() + str(page.evaluate(typed))
    for value in values.values():
        assert value not in shown
    assert_no_csp_violations(page)
    context.close()
    client.beta.agents.sessions.delete(session.id)
