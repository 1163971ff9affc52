"""Sign-in forms in the guest's browser: found by cubicle, filled with values the model never sees.

:class:`SigninDriver` works through a :class:`cubicle_guest.cdp.CdpBrowser` (the DevTools protocol
on a pipe only the agent holds). :meth:`SigninDriver.find` looks at every page and every frame,
cross-origin iframes included (each out-of-process frame is its own target, attached with
``flatten``), runs :data:`cubicle_guest.signin_script.SCRIPT` in an isolated world of each frame and
answers the first frame with sign-in groups as a :class:`SigninForm`:

- ``credential_origin`` is the frame's ``securityOrigin`` as the browser reports it — the origin
  that receives the values, never a name a page or the model chose;
- ``fields`` (``id``, ``label``, ``type``, ``required``) are the fields of every group of that
  frame; several groups (two sign-in methods) become ``options``, each with its ``field_ids``.

:meth:`SigninDriver.fill` writes values into the fields of the chosen group and submits it, but only
while the frame still has the form's origin and the form still describes as it did when found
(otherwise :class:`SigninError` ``changed``): values given for one origin are never typed into
another. The driver remembers the values it submitted (memory only, for the browser's life) and
removes them from every string it derives from a page afterwards (labels, titles); no error or log
line of this module carries a value.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from cubicle_guest.cdp import CdpBrowser, CdpError
from cubicle_guest.signin_script import SCRIPT

__all__ = [
    "WITHHELD",
    "SigninDriver",
    "SigninError",
    "SigninField",
    "SigninForm",
    "SigninOption",
]

log = logging.getLogger("cubicle_guest.signin")

WITHHELD: Final = "[withheld]"
"""What a submitted value is replaced with in a string derived from a page."""
WORLD: Final = "cubicle-signin"
"""The isolated world's name (what DevTools shows for it)."""
_ID_TYPES: Final = {
    "password": "password",
    "code": "code",
    "email": "email",
    "username": "username",
}


class SigninError(Exception):
    """A sign-in step failed. ``code``: ``no_form`` (nothing to fill), ``changed`` (the form or
    its frame's origin changed since it was found), ``bad_values`` (values not matching the
    form), ``browser`` (the browser failed). The message never contains a submitted value."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class SigninField:
    """One control of a found form (the SDK's ``browser_authentication`` field)."""

    id: str
    label: str
    type: str
    required: bool


@dataclass(frozen=True)
class SigninOption:
    """One sign-in method of a page with several (the SDK's option)."""

    id: str
    label: str
    field_ids: tuple[str, ...]


@dataclass(frozen=True)
class SigninForm:
    """A sign-in form found in one frame.

    ``where`` (target, frame, description JSON per group) is cubicle's own; the rest is what a
    ``browser_authentication`` request carries (:meth:`request`).
    """

    credential_origin: str
    title: str
    fields: tuple[SigninField, ...]
    options: tuple[SigninOption, ...]
    target_id: str
    frame_id: str
    groups: tuple[str, ...]
    """Each group's description (JSON) as found; fill checks it is unchanged."""
    positions: Mapping[str, tuple[int, int]]
    """field id → (group index, position in that group)."""

    def request(self, reason: str | None = None) -> dict[str, Any]:
        """The ``request`` object of a ``computer_use_approval_request`` (SDK field names)."""
        return {
            "type": "browser_authentication",
            "reason": reason if reason is not None else f"Sign in to {self.credential_origin}",
            "credential_origin": self.credential_origin,
            "fields": [
                {"id": f.id, "label": f.label, "type": f.type, "required": f.required}
                for f in self.fields
            ],
            "options": [
                {"id": o.id, "label": o.label, "field_ids": list(o.field_ids)} for o in self.options
            ],
        }


class SigninDriver:
    """Finds and fills sign-in forms in one browser. Not thread-safe: one caller at a time."""

    def __init__(self, browser: CdpBrowser) -> None:
        self._browser = browser
        self._sessions: dict[str, str] = {}
        self._submitted: list[str] = []

    # -- finding ----------------------------------------------------------------------------

    def find(self) -> SigninForm | None:
        """The first frame (pages in the browser's order, each page's frames top-down, then
        out-of-process frames) with sign-in groups, or None.

        :raises SigninError: ``browser`` when the browser does not answer.
        """
        try:
            for target_id, _kind in self._targets():
                session = self._session(target_id)
                if session is None:
                    continue
                for frame_id, origin in self._frames(session):
                    found = self._evaluate(session, frame_id, "detect", [])
                    if not isinstance(found, dict) or not found.get("groups"):
                        continue
                    return self._form(target_id, frame_id, origin, found)
        except CdpError as exc:
            raise SigninError("browser", f"the browser did not answer: {exc}") from exc
        return None

    def _targets(self) -> list[tuple[str, str]]:
        infos = self._browser.call("Target.getTargets").get("targetInfos", [])
        chosen = [
            (str(i["targetId"]), str(i["type"]))
            for i in infos
            if i.get("type") in ("page", "iframe")
        ]
        # pages first (a top document before the iframes it embeds), then iframes
        return sorted(chosen, key=lambda pair: pair[1] != "page")

    def _session(self, target_id: str) -> str | None:
        session = self._sessions.get(target_id)
        if session is not None:
            return session
        try:
            reply = self._browser.call(
                "Target.attachToTarget", {"targetId": target_id, "flatten": True}
            )
        except CdpError:
            return None  # the target went away meanwhile
        session = str(reply["sessionId"])
        self._sessions[target_id] = session
        return session

    def _frames(self, session: str) -> list[tuple[str, str]]:
        """(frame id, security origin) of the frames this target renders, top-down."""
        try:
            tree = self._browser.call("Page.getFrameTree", session_id=session)["frameTree"]
        except (CdpError, KeyError):
            self._sessions = {t: s for t, s in self._sessions.items() if s != session}
            return []
        frames: list[tuple[str, str]] = []
        pending = [tree]
        while pending:
            node = pending.pop(0)
            frame = node["frame"]
            frames.append((str(frame["id"]), str(frame.get("securityOrigin", ""))))
            pending.extend(node.get("childFrames", []))
        return frames

    def _evaluate(self, session: str, frame_id: str, name: str, arguments: list[Any]) -> Any:
        """Call ``name`` of :data:`SCRIPT` in a fresh isolated world of the frame. None when the
        frame is not this target's to run (an out-of-process child) or went away."""
        try:
            world = self._browser.call(
                "Page.createIsolatedWorld",
                {"frameId": frame_id, "worldName": WORLD},
                session_id=session,
            )
            reply = self._browser.call(
                "Runtime.callFunctionOn",
                {
                    "functionDeclaration": f"function(...a) {{ return ({SCRIPT}).{name}(...a); }}",
                    "executionContextId": world["executionContextId"],
                    "arguments": [{"value": value} for value in arguments],
                    "returnByValue": True,
                    "awaitPromise": False,
                },
                session_id=session,
            )
        except (CdpError, KeyError):
            return None
        if "exceptionDetails" in reply:
            log.info("the sign-in script failed in a frame (%s)", name)
            return None
        return reply.get("result", {}).get("value")

    def _form(
        self, target_id: str, frame_id: str, origin: str, found: Mapping[str, Any]
    ) -> SigninForm:
        groups: list[Mapping[str, Any]] = list(found["groups"])
        fields: list[SigninField] = []
        positions: dict[str, tuple[int, int]] = {}
        options: list[SigninOption] = []
        used: set[str] = set()
        for index, group in enumerate(groups):
            ids: list[str] = []
            for position, field in enumerate(group["fields"]):
                field_id = _unique(_ID_TYPES.get(str(field["kind"]), "field"), used)
                fields.append(
                    SigninField(
                        id=field_id,
                        label=self._scrub(str(field["label"])),
                        type=str(field["type"]),
                        required=bool(field["required"]),
                    )
                )
                positions[field_id] = (index, position)
                ids.append(field_id)
            if len(groups) > 1:
                label = self._scrub(str(group["label"]))
                option_id = _unique(_slug(label) or f"method_{index + 1}", used)
                options.append(SigninOption(id=option_id, label=label, field_ids=tuple(ids)))
        return SigninForm(
            credential_origin=origin,
            title=self._scrub(str(found.get("title", ""))),
            fields=tuple(fields),
            options=tuple(options),
            target_id=target_id,
            frame_id=frame_id,
            groups=tuple(json.dumps(g, separators=(",", ":"), ensure_ascii=False) for g in groups),
            positions=positions,
        )

    # -- filling ----------------------------------------------------------------------------

    def fill(self, form: SigninForm, values: Mapping[str, str], option: str | None = None) -> int:
        """Write ``values`` (field id → value) into ``form``'s group (``option``'s when the form
        has options) and submit it. Answers how many fields were written.

        :raises SigninError: ``bad_values`` (an unknown field, a field of another option, an
            option missing or unknown), ``changed`` (the frame's origin or the form is no longer
            what was found: nothing is written), ``browser``.
        """
        group = self._group(form, values, option)
        entries = [[form.positions[field_id][1], value] for field_id, value in values.items()]
        try:
            session = self._session(form.target_id)
            frames = dict(self._frames(session)) if session is not None else {}
            if session is None or frames.get(form.frame_id) != form.credential_origin:
                raise SigninError(
                    "changed",
                    f"the sign-in frame no longer shows {form.credential_origin}; "
                    "nothing was typed",
                )
            self._submitted.extend(v for v in values.values() if v)
            result = self._evaluate(
                session, form.frame_id, "fill", [group, form.groups[group], entries]
            )
        except CdpError as exc:
            raise SigninError("browser", f"the browser did not answer: {exc}") from exc
        if not isinstance(result, dict) or "error" in result:
            raise SigninError(
                "changed", "the sign-in form changed since it was found; nothing was typed"
            )
        log.info(
            "sign-in: %d field(s) submitted to %s, values withheld",
            len(entries),
            form.credential_origin,
        )
        return int(result.get("filled", 0))

    def _group(self, form: SigninForm, values: Mapping[str, str], option: str | None) -> int:
        unknown = sorted(set(values) - set(form.positions))
        if unknown:
            raise SigninError("bad_values", f"unknown field id(s): {', '.join(unknown)}")
        if form.options:
            chosen = next((o for o in form.options if o.id == option), None)
            if chosen is None:
                known = ", ".join(o.id for o in form.options)
                raise SigninError("bad_values", f"choose one option of: {known}")
            outside = sorted(set(values) - set(chosen.field_ids))
            if outside:
                raise SigninError(
                    "bad_values", f"field(s) {', '.join(outside)} are not of option {chosen.id}"
                )
            return next(i for i, o in enumerate(form.options) if o.id == chosen.id)
        if option is not None:
            raise SigninError("bad_values", "this form has no options; send no option")
        return 0

    def scrub(self, text: str) -> str:
        """``text`` with every value submitted through this driver replaced by :data:`WITHHELD`."""
        return self._scrub(text)

    def _scrub(self, text: str) -> str:
        for value in sorted(set(self._submitted), key=len, reverse=True):
            text = text.replace(value, WITHHELD)
        return text


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40]


def _unique(base: str, used: set[str]) -> str:
    name, counter = base, 2
    while name in used:
        name, counter = f"{base}_{counter}", counter + 1
    used.add(name)
    return name
