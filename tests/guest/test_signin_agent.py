"""The agent's sign-in ops on a real desktop: its own Chromium (headed, on the test's Xvfb) with
the DevTools protocol on a pipe, a form found and filled, the values nowhere in the agent's log or
errors, the browser ended with the agent."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from cubicle_guest.errors import GuestError
from tests.support.agent import start_agent
from tests.support.signin_site import SCRIPT_BUILT, Site, browser_argv, until
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11

EMAIL, PASSWORD = "grace@example.test", 'pa55-\u00e9-"quoted"'


@pytest.fixture
def profile() -> Iterator[str]:
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed")
    folder = tempfile.mkdtemp(prefix="cubicle-signin-agent-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_agent_finds_and_fills_a_form_in_its_own_browser(
    xserver: Xvfb, tmp_path_factory: pytest.TempPathFactory, site: Site, profile: str
) -> None:
    site.pages["/login"] = SCRIPT_BUILT
    with start_agent(xserver.display, tmp_path_factory.mktemp("agent")) as agent:
        with agent.client() as client:
            assert "signin" in client.info().result["features"]
            with pytest.raises(GuestError, match="no browser started"):
                client.signin_find()
            started = client.browser_start(
                argv=browser_argv(profile, headless=False), url=site.url("/login")
            ).result
            assert started["started"] is True
            browser_pid = started["pid"]
            form = until(lambda: client.signin_find().result["form"], "the sign-in form")
            assert form["credential_origin"] == site.url("")
            assert [f["id"] for f in form["fields"]] == ["username", "password"]

            with pytest.raises(GuestError) as wrong:
                client.call(
                    "signin_fill", {"form_id": form["form_id"], "values": {"password": 12345678}}
                )
            assert wrong.value.code == "bad_args" and "12345678" not in str(wrong.value)
            with pytest.raises(GuestError) as stale:
                client.signin_fill("form_0", {"password": PASSWORD})
            assert stale.value.code == "signin_failed" and PASSWORD not in str(stale.value)

            filled = client.signin_fill(
                form["form_id"], {"username": EMAIL, "password": PASSWORD}
            ).result
            assert filled == {"filled": 2}
            until(lambda: site.received or None, "the form's submission")
            assert site.received == [{"user": EMAIL, "pw": PASSWORD}]
            assert _alive(browser_pid)
        log = agent.log_text()
        assert "op=signin_fill" in log
        for secret in (EMAIL, PASSWORD, "pa55"):
            assert secret not in log
        agent.stop()
    assert not _alive(browser_pid), "the agent's browser outlived the agent"


def test_the_browser_ends_when_its_agent_is_killed(
    xserver: Xvfb, tmp_path_factory: pytest.TempPathFactory, profile: str
) -> None:
    """SIGKILL leaves no cleanup to run: the closed pipe ends the browser."""
    agent = start_agent(xserver.display, tmp_path_factory.mktemp("agent"))
    with agent:
        with agent.client() as client:
            pid = client.browser_start(argv=browser_argv(profile, headless=False)).result["pid"]
        os.kill(agent.pid, 9)
        until(lambda: True if not _alive(pid) else None, "the browser's exit", timeout_s=30)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs and is no zombie (the agent reaps its browser; a killed agent's
    orphan is reaped by init)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
