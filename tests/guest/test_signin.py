"""Sign-in forms found and filled through Chromium's DevTools pipe (cubicle_guest.cdp/.signin).

A real Chromium (headless, the host's) drives pages a local HTTP server serves on two origins
(``127.0.0.1`` and ``localhost``, two sites: a cross-origin iframe is its own process). The
server records each form POST, so filling is proven by what the site received. None of these
pages is declared anywhere else: detection reads the page, not a task file.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator

import pytest

from cubicle_guest.cdp import CdpBrowser
from cubicle_guest.signin import SigninDriver, SigninError, SigninForm
from tests.support.signin_site import SCRIPT_BUILT, Site, browser_argv, until

TWO_METHODS = """<!doctype html><title>Tracker</title>
<form method=post action=/received><h2>Use a password</h2>
  <input type=email name=email aria-label="Email address">
  <input type=password name=pw placeholder=Password><button>Sign in</button></form>
<form method=post action=/received><h2>Email me a code</h2>
  <input type=email name=email2 aria-label="Email for the code"><button>Continue</button></form>
<form action=/search><input name=q aria-label=Search><button>Search</button></form>"""

SEARCH_ONLY = """<!doctype html><title>Docs</title>
<form action=/search><input name=q aria-label=Search><button>Search</button></form>"""

CODE_PAGE = """<!doctype html><title>Check</title><form method=post action=/received>
<label>Code sent to alice@example.test<input name=otp autocomplete=one-time-code></label>
<button>Verify</button></form>"""


@pytest.fixture(scope="module")
def browser() -> Iterator[CdpBrowser]:
    """One browser for the module (each test navigates its one tab and finds with a new driver)."""
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed")
    profile = tempfile.mkdtemp(prefix="cubicle-signin-")
    started = CdpBrowser([*browser_argv(profile, headless=True), "about:blank"])
    try:
        yield started
    finally:
        started.close()
        shutil.rmtree(profile, ignore_errors=True)


def navigate(browser: CdpBrowser, url: str) -> None:
    page = next(
        t["targetId"]
        for t in browser.call("Target.getTargets")["targetInfos"]
        if t["type"] == "page"
    )
    session = browser.call("Target.attachToTarget", {"targetId": page, "flatten": True})
    browser.call("Page.navigate", {"url": url}, session_id=session["sessionId"])


def found(driver: SigninDriver, title: str | None = None) -> Callable[[], SigninForm | None]:
    def probe() -> SigninForm | None:
        form = driver.find()
        return form if form is not None and (title is None or form.title == title) else None

    return probe


def test_a_form_built_by_script_after_load_is_found_filled_and_submitted(
    site: Site, browser: CdpBrowser, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    site.pages["/login"] = SCRIPT_BUILT
    navigate(browser, site.url("/login"))
    driver = SigninDriver(browser)
    form = until(found(driver), "sign-in form")
    request = form.request()
    assert request["credential_origin"] == site.url("")
    assert request["fields"] == [
        {"id": "username", "label": "Work email", "type": "text", "required": False},
        {"id": "password", "label": "Secret", "type": "password", "required": True},
    ]
    assert request["options"] == []

    filled = driver.fill(form, {"username": "ada@example.test", "password": "s3cr3t-Ω"})
    assert filled == 2
    until(lambda: site.received or None, "form submission")
    assert site.received == [{"user": "ada@example.test", "pw": "s3cr3t-Ω"}]
    for secret in ("ada@example.test", "s3cr3t-Ω"):
        assert secret not in caplog.text
    assert "2 field(s) submitted" in caplog.text


def test_two_methods_become_options_and_only_the_chosen_one_is_filled(
    site: Site, browser: CdpBrowser
) -> None:
    site.pages["/two"] = TWO_METHODS
    navigate(browser, site.url("/two"))
    driver = SigninDriver(browser)
    form = until(found(driver, "Tracker"), "two-method form")
    request = form.request()
    assert [(f["id"], f["label"], f["type"]) for f in request["fields"]] == [
        ("email", "Email address", "email"),
        ("password", "Password", "password"),
        ("email_2", "Email for the code", "email"),
    ]
    assert request["options"] == [
        {"id": "use_a_password", "label": "Use a password", "field_ids": ["email", "password"]},
        {"id": "email_me_a_code", "label": "Email me a code", "field_ids": ["email_2"]},
    ]
    with pytest.raises(SigninError, match="not of option email_me_a_code"):
        driver.fill(form, {"email": "x"}, option="email_me_a_code")
    with pytest.raises(SigninError, match="choose one option"):
        driver.fill(form, {"email_2": "x"})
    driver.fill(form, {"email_2": "bob@example.test"}, option="email_me_a_code")
    until(lambda: site.received or None, "form submission")
    assert site.received == [{"email2": "bob@example.test"}]


def test_a_page_without_sign_in_has_no_form(site: Site, browser: CdpBrowser) -> None:
    site.pages["/docs"] = SEARCH_ONLY
    navigate(browser, site.url("/docs"))
    driver = SigninDriver(browser)

    def loaded() -> bool | None:
        return True if driver.find() is None and _title(browser) == "Docs" else None

    until(loaded, "the docs page")
    assert driver.find() is None


def test_a_cross_origin_iframe_form_has_the_iframes_origin(site: Site, browser: CdpBrowser) -> None:
    site.pages["/frame"] = SCRIPT_BUILT
    site.pages["/top"] = (
        f"<!doctype html><title>Shop</title><iframe src='{site.url('/frame', 'localhost')}'"
        " width=600 height=400></iframe>"
    )
    navigate(browser, site.url("/top"))
    driver = SigninDriver(browser)
    form = until(found(driver), "the iframe's form")
    assert form.credential_origin == site.url("", "localhost")
    assert form.credential_origin != site.url("")


def test_values_for_one_origin_are_never_typed_into_another(
    site: Site, browser: CdpBrowser
) -> None:
    """The form is found on 127.0.0.1; the same page then shows on localhost: nothing is sent."""
    site.pages["/login"] = SCRIPT_BUILT
    navigate(browser, site.url("/login"))
    driver = SigninDriver(browser)
    form = until(found(driver), "sign-in form")
    navigate(browser, site.url("/login", "localhost"))
    until(
        lambda: (
            f
            if (f := driver.find()) is not None and f.credential_origin != form.credential_origin
            else None
        ),
        "the form on the other origin",
    )
    with pytest.raises(SigninError) as raised:
        driver.fill(form, {"username": "ada@example.test", "password": "pw-for-127"})
    assert raised.value.code == "changed"
    assert "pw-for-127" not in str(raised.value)
    assert site.received == []


def test_labels_after_a_submission_have_the_values_removed(site: Site, browser: CdpBrowser) -> None:
    site.pages["/login"] = SCRIPT_BUILT
    site.pages["/code"] = CODE_PAGE
    navigate(browser, site.url("/login"))
    driver = SigninDriver(browser)
    form = until(found(driver), "sign-in form")
    driver.fill(form, {"username": "alice@example.test", "password": "pw"})
    until(lambda: site.received or None, "form submission")
    navigate(browser, site.url("/code"))
    code = until(found(driver, "Check"), "the code form")
    assert [(f.id, f.label) for f in code.fields] == [("code", "Code sent to [withheld]")]


def _title(browser: CdpBrowser) -> str:
    pages = [t for t in browser.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
    return str(pages[0]["title"]) if pages else ""
