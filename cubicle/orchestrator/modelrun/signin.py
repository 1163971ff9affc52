"""Browser sign-in during a run: the person types the values, the model never sees them.

The guest agent finds sign-in forms in its own browser (:mod:`cubicle_guest.signin_ops`; the
form's ``credential_origin`` is the frame's origin as the browser reports it). :class:`SigninWatch`
asks it before every screenshot the model is to get (:meth:`SigninWatch.check`, called from
``RecordedSession.before_action``): while a form is shown, the turn waits on the *person* —
:data:`SigninCallback`, given by the Python API's caller, ``cubicle run``'s terminal prompt
(:func:`terminal_callback`) or serve's pending request — and the model's screenshot is taken only
after the form was filled and submitted (or cancelled). Successive forms (a password page, then a
one-time code) are successive requests. An approval policy (``--policy``) never answers: with no
callback a request is cancelled.

Values go from the callback to the agent's ``signin_fill`` and nowhere else: the trajectory
records ``signin`` events with the request (origin, field ids/labels/types, options) and the
answer's action, option and count ("2 fields submitted, values withheld"). :func:`check_answer`
holds the rules of the product (serve applies the same ones), each error naming its rule and
never a value.
"""

from __future__ import annotations

import getpass
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TextIO

from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError
from cubicle_guest.signin import SigninField, SigninOption

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "MAX_VALUES",
    "MAX_VALUE_CHARS",
    "SigninAnswer",
    "SigninAnswerError",
    "SigninCallback",
    "SigninField",
    "SigninOption",
    "SigninRequest",
    "SigninWatch",
    "check_answer",
    "credentials_callback",
    "terminal_callback",
    "withheld_note",
]

MAX_VALUES: Final = 6
"""At most this many field values in one submission."""
MAX_VALUE_CHARS: Final = 16_384
"""Each value at most this many characters."""
MAX_PAYLOAD_BYTES: Final = 120 * 1024
"""The values and the option together, as JSON, at most this many bytes."""
MAX_STEPS: Final = 8
"""Successive sign-in forms handled before one screenshot (a method, an email, a code...)."""
AFTER_SUBMIT_QUIET_MS: Final = 500
"""The screen must be quiet this long after a submission before the next form is looked for."""


class SigninAnswerError(ValueError):
    """An answer breaks a rule; ``rule`` names it (``max_values``, ``value_length``,
    ``payload_size``, ``duplicate_field``, ``unknown_field``, ``option``, ``required``,
    ``empty``). The message names field ids and limits, never a value."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


@dataclass(frozen=True)
class SigninRequest:
    """One pending sign-in (the ``browser_authentication`` request of the product)."""

    reason: str
    credential_origin: str
    fields: tuple[SigninField, ...]
    options: tuple[SigninOption, ...] = ()
    form_id: str = ""
    """The agent's name of the form (cubicle's, not part of the product's request)."""

    @classmethod
    def from_agent(cls, form: Mapping[str, Any]) -> SigninRequest:
        """From ``signin_find``'s ``form``."""
        origin = str(form["credential_origin"])
        return cls(
            reason=f"Sign in to {origin}",
            credential_origin=origin,
            fields=tuple(
                SigninField(str(f["id"]), str(f["label"]), str(f["type"]), bool(f["required"]))
                for f in form["fields"]
            ),
            options=tuple(
                SigninOption(str(o["id"]), str(o["label"]), tuple(map(str, o["field_ids"])))
                for o in form["options"]
            ),
            form_id=str(form["form_id"]),
        )

    def as_request(self) -> dict[str, Any]:
        """The product's ``request`` object (``type: browser_authentication``)."""
        return {
            "type": "browser_authentication",
            "reason": self.reason,
            "credential_origin": self.credential_origin,
            "fields": [
                {"id": f.id, "label": f.label, "type": f.type, "required": f.required}
                for f in self.fields
            ],
            "options": [
                {"id": o.id, "label": o.label, "field_ids": list(o.field_ids)} for o in self.options
            ],
        }


@dataclass(frozen=True)
class SigninAnswer:
    """The person's answer: ``submit`` with ``fields`` ((field id, value) pairs, secret: never in
    ``repr``) and ``option``, or ``cancel``."""

    action: Literal["submit", "cancel"]
    fields: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    option: str | None = None

    @classmethod
    def submit(cls, values: Mapping[str, str], option: str | None = None) -> SigninAnswer:
        """A submission of ``values`` (field id → value)."""
        return cls("submit", tuple(values.items()), option)

    @classmethod
    def cancel(cls) -> SigninAnswer:
        """No sign-in: the turn goes on without it."""
        return cls("cancel")


SigninCallback = Callable[[SigninRequest], SigninAnswer]
"""Who answers a sign-in: called in the run's loop thread; the turn waits until it returns."""


def check_answer(request: SigninRequest, answer: SigninAnswer) -> None:
    """Hold ``answer`` to the product's rules for ``request``.

    :raises SigninAnswerError: the first rule broken (its ``rule`` and a message naming it).
    """
    if answer.action == "cancel":
        if answer.fields or answer.option is not None:
            raise SigninAnswerError("cancel", "a cancel carries no fields and no selected_option")
        return
    ids = [field_id for field_id, _value in answer.fields]
    if len(ids) > MAX_VALUES:
        raise SigninAnswerError("max_values", f"at most {MAX_VALUES} field values, got {len(ids)}")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise SigninAnswerError("duplicate_field", f"field(s) given twice: {', '.join(repeated)}")
    for field_id, value in answer.fields:
        if len(value) > MAX_VALUE_CHARS:
            raise SigninAnswerError(
                "value_length",
                f"the value of {field_id} has {len(value)} characters, over {MAX_VALUE_CHARS}",
            )
    payload = json.dumps(
        {"fields": list(answer.fields), "selected_option": answer.option}, ensure_ascii=False
    )
    if len(payload.encode()) > MAX_PAYLOAD_BYTES:
        raise SigninAnswerError(
            "payload_size", f"values and option over {MAX_PAYLOAD_BYTES} bytes of JSON"
        )
    allowed = [f.id for f in request.fields]
    if request.options:
        chosen = next((o for o in request.options if o.id == answer.option), None)
        if chosen is None:
            offered = ", ".join(o.id for o in request.options)
            raise SigninAnswerError(
                "option", f"selected_option must be one of {offered}, got {answer.option!r}"
            )
        allowed = list(chosen.field_ids)
    elif answer.option is not None:
        raise SigninAnswerError("option", "this request offers no options: omit selected_option")
    unknown = [i for i in ids if i not in allowed]
    if unknown:
        raise SigninAnswerError(
            "unknown_field", f"field(s) {', '.join(unknown)} not among {', '.join(allowed)}"
        )
    if allowed and not ids:
        raise SigninAnswerError("empty", "this request has fields: submit at least one")
    given = dict(answer.fields)
    missing = [
        f.id for f in request.fields if f.id in allowed and f.required and not given.get(f.id)
    ]
    if missing:
        raise SigninAnswerError("required", f"required field(s) empty: {', '.join(missing)}")


def withheld_note(count: int) -> str:
    """What records say of a submission: "2 fields submitted, values withheld"."""
    return f"{count} field{'s' if count != 1 else ''} submitted, values withheld"


class SigninWatch:
    """Looks for sign-in forms before each model screenshot and has the person answer them.

    :param agent: the guest agent (the ``signin`` feature; without it :meth:`check` does nothing).
    :param callback: who answers; None: every request is cancelled (no person present).
    :param recorder: where ``signin`` events go.
    """

    def __init__(
        self,
        agent: AgentClient,
        callback: SigninCallback | None,
        recorder: TrajectoryRecorder,
    ) -> None:
        self.agent = agent
        self.callback = callback
        self.recorder = recorder
        features = (agent.hello_result or {}).get("features") or ()
        self.enabled = "signin" in features
        self._declined: set[str] = set()
        self.submitted = 0
        """How many submissions were filled in this run."""

    def check(self) -> None:
        """Answer every sign-in form the browser shows now (up to :data:`MAX_STEPS` in a row)."""
        if not self.enabled:
            return
        for _step in range(MAX_STEPS):
            request = self._find()
            if request is None or _signature(request) in self._declined:
                return
            if not self._answer(request):
                return

    def _find(self) -> SigninRequest | None:
        try:
            form = self.agent.signin_find(timeout=60).result.get("form")
        except GuestError as exc:
            if (exc.details or {}).get("reason") != "no_browser":
                self.recorder.event("error", where="signin", type=exc.code, message=str(exc))
            return None
        return None if form is None else SigninRequest.from_agent(form)

    def _answer(self, request: SigninRequest) -> bool:
        """Ask, then fill or cancel; True when a submission went in (look again)."""
        asked = time.monotonic()
        self.recorder.event("signin", stage="request", request=request.as_request())
        if self.callback is None:
            answer = SigninAnswer.cancel()
            by = "none: no person to answer (an approval policy never answers a sign-in)"
        else:
            answer = self.callback(request)
            by = "person"
            check_answer(request, answer)
        waited_ms = round((time.monotonic() - asked) * 1000)
        if answer.action == "cancel":
            self._declined.add(_signature(request))
            self.recorder.event("signin", stage="cancel", by=by, waited_ms=waited_ms)
            return False
        try:
            filled = int(
                self.agent.signin_fill(
                    request.form_id, dict(answer.fields), option=answer.option, timeout=60
                ).result["filled"]
            )
        except GuestError as exc:
            self.recorder.event("signin", stage="failed", reason=str(exc), waited_ms=waited_ms)
            return False
        self.submitted += 1
        self.recorder.event(
            "signin",
            stage="submit",
            by=by,
            option=answer.option,
            fields=filled,
            note=withheld_note(filled),
            waited_ms=waited_ms,
        )
        self.agent.settle(quiet_ms=AFTER_SUBMIT_QUIET_MS, timeout_ms=10_000, timeout=30)
        return True


def _signature(request: SigninRequest) -> str:
    return json.dumps([request.credential_origin, request.as_request()["fields"]])


def terminal_callback(
    read_secret: Callable[[str], str] = getpass.getpass,
    read_line: Callable[[str], str] = input,
    out: TextIO = sys.stderr,
) -> SigninCallback:
    """``cubicle run``'s person: the request shown on the terminal, values read without echo
    (``getpass``); an empty answer to the destination question cancels."""

    def ask(request: SigninRequest) -> SigninAnswer:
        print(f"\n{request.reason}\n  credentials go to: {request.credential_origin}", file=out)
        if read_line("Sign in there? [y/N] ").strip().lower() not in ("y", "yes"):
            return SigninAnswer.cancel()
        fields: Sequence[SigninField] = request.fields
        option: str | None = None
        if request.options:
            for number, offered in enumerate(request.options, 1):
                print(f"  {number}. {offered.label}", file=out)
            choice = read_line("Method number: ").strip()
            if not choice.isdigit() or not 1 <= int(choice) <= len(request.options):
                return SigninAnswer.cancel()
            chosen = request.options[int(choice) - 1]
            option = chosen.id
            fields = [f for f in request.fields if f.id in chosen.field_ids]
        values = {}
        for item in fields:
            prompt = f"{item.label}{'' if item.required else ' (optional)'}: "
            value = read_secret(prompt)
            if value:
                values[item.id] = value
        return SigninAnswer.submit(values, option)

    return ask


def credentials_callback(email: str, password: str, code: str) -> SigninCallback:
    """A task's test credentials given as a person would (the drill, a suite's oracle: no person
    present): an email or username field gets ``email``, a password ``password``, a code ``code``;
    with options, the first option whose fields it can fill all of."""

    def value_for(item: SigninField) -> str | None:
        kind = item.id.rstrip("_0123456789")
        return {"email": email, "username": email, "password": password, "code": code}.get(kind)

    def give(request: SigninRequest) -> SigninAnswer:
        fields = {f.id: f for f in request.fields}
        if request.options:
            for offered in request.options:
                values = {i: value_for(fields[i]) for i in offered.field_ids if i in fields}
                if values and all(v is not None for v in values.values()):
                    return SigninAnswer.submit(
                        {k: v for k, v in values.items() if v is not None}, offered.id
                    )
            return SigninAnswer.cancel()
        values = {f.id: value_for(f) for f in request.fields}
        known = {k: v for k, v in values.items() if v is not None}
        return SigninAnswer.submit(known) if known else SigninAnswer.cancel()

    return give
