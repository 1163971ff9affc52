"""The agent's sign-in operations: ``browser_start``/``browser_stop``, ``signin_find``/``_fill``.

:class:`SigninOps` owns the one browser the agent starts with its DevTools protocol on a pipe
(:class:`cubicle_guest.cdp.CdpBrowser`) and the :class:`cubicle_guest.signin.SigninDriver` over it.

- ``browser_start`` starts it (``argv``, default ``["chromium"]``, and an optional ``url``) unless
  it is running; answers ``pid`` and ``started`` (False: it was running, the URL, if any, opened
  in it as a new tab); ``browser_stop`` ends it (``stopped``).
- ``signin_find`` answers ``form``: None, or the found form's ``browser_authentication`` request
  fields (``credential_origin``, ``fields``, ``options``, ``title``) plus ``form_id``, by which
  ``signin_fill`` names it. Only the last found form can be filled.
- ``signin_fill`` (``form_id``, ``values`` field id → value, optional ``option``) writes and
  submits; answers ``filled`` (a count). Its values are never logged and never appear in an error
  (:data:`cubicle_guest.protocol.OpSpec.secret`); an error says which rule failed.

Closing the agent ends the browser (:meth:`SigninOps.close`).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping
from typing import Any

from cubicle_guest.cdp import CdpBrowser, CdpError
from cubicle_guest.errors import GuestError
from cubicle_guest.signin import SigninDriver, SigninError, SigninForm

__all__ = ["DEFAULT_BROWSER", "SigninOps"]

log = logging.getLogger("cubicle_guest.signin_ops")

DEFAULT_BROWSER = ("chromium",)
"""The browser ``browser_start`` runs by default (Debian's wrapper reads /etc/chromium.d)."""


class SigninOps:
    """The sign-in operations of one agent (thread-safe: one operation at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._browser: CdpBrowser | None = None
        self._driver: SigninDriver | None = None
        self._form: tuple[str, SigninForm] | None = None
        self._ids = itertools.count(1)

    def browser_start(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Start the browser (or open ``url`` in the running one)."""
        url = args.get("url")
        with self._lock:
            if self._browser is not None and self._browser.alive:
                if url:
                    self._call(self._browser, "Target.createTarget", {"url": url})
                return {"pid": self._browser.pid, "started": False}
            argv = [*(args.get("argv") or DEFAULT_BROWSER), *([url] if url else [])]
            try:
                self._browser = CdpBrowser(argv, env=args.get("env"))
            except CdpError as exc:
                raise GuestError("io_error", str(exc), op="browser_start") from exc
            self._driver = SigninDriver(self._browser)
            self._form = None
            log.info("browser started (pid %d), DevTools on a pipe", self._browser.pid)
            return {"pid": self._browser.pid, "started": True}

    def signin_find(self, _args: Mapping[str, Any]) -> dict[str, Any]:
        """The sign-in form the browser shows now, or ``form: None``."""
        with self._lock:
            driver = self._running()
            try:
                form = driver.find()
            except SigninError as exc:
                raise GuestError("signin_failed", str(exc), details={"reason": exc.code}) from exc
            if form is None:
                self._form = None
                return {"form": None}
            form_id = f"form_{next(self._ids)}"
            self._form = (form_id, form)
            request = form.request()
            return {
                "form": {
                    "form_id": form_id,
                    "title": form.title,
                    "credential_origin": request["credential_origin"],
                    "fields": request["fields"],
                    "options": request["options"],
                }
            }

    def signin_fill(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Fill and submit the last found form (see the module's docstring)."""
        with self._lock:
            driver = self._running()
            if self._form is None or self._form[0] != args["form_id"]:
                raise GuestError(
                    "signin_failed",
                    f"no found form {args['form_id']!r} (only the last signin_find's form fills)",
                    details={"reason": "unknown_form"},
                )
            form = self._form[1]
            values = args["values"]
            if not all(isinstance(v, str) for v in values.values()):
                raise GuestError("bad_args", "every value must be a string", op="signin_fill")
            try:
                filled = driver.fill(form, values, args.get("option"))
            except SigninError as exc:
                raise GuestError("signin_failed", str(exc), details={"reason": exc.code}) from exc
            self._form = None
            return {"filled": filled}

    def scrub(self, text: str) -> str:
        """``text`` without any value this agent has submitted."""
        driver = self._driver
        return text if driver is None else driver.scrub(text)

    def _running(self) -> SigninDriver:
        if self._browser is None or self._driver is None or not self._browser.alive:
            raise GuestError(
                "signin_failed",
                "no browser started by browser_start",
                details={"reason": "no_browser"},
            )
        return self._driver

    @staticmethod
    def _call(browser: CdpBrowser, method: str, params: Mapping[str, Any]) -> None:
        try:
            browser.call(method, params)
        except CdpError as exc:
            raise GuestError("signin_failed", str(exc), details={"reason": "browser"}) from exc

    def browser_stop(self, _args: Mapping[str, Any]) -> dict[str, Any]:
        """End the browser ``browser_start`` started: ``stopped`` (False: none was running)."""
        with self._lock:
            running = self._browser is not None
        self.close()
        return {"stopped": running}

    def close(self) -> None:
        """End the browser this agent started (idempotent)."""
        with self._lock:
            browser, self._browser, self._driver, self._form = self._browser, None, None, None
        if browser is not None:
            browser.close()
