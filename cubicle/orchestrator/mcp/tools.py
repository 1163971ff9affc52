"""The tools ``cubicle mcp`` serves: one table, :data:`TOOLS`, name → schema, text, handler.

A handler is blocking (the server runs it in a worker thread) and gets the server's
:class:`~cubicle.orchestrator.mcp.desktops.Desktops` and its arguments, already validated as the
tool's model (:mod:`cubicle.orchestrator.mcp.schemas`); it returns the content blocks of the
result or raises (the server turns a raised error into an error result naming what was wrong).

The input actions go through the sandbox's :class:`~cubicle.drivers.computer.GuestDriver`
(``perform`` with :func:`cubicle.drivers.actions.plan_action`): the same validation, coordinate
mapping (the coordinates are those of the last screenshot), settle and receipt as every driver;
the result's text says what the screen did (the receipt).

Adding a tool is one :class:`ToolSpec` in :data:`TOOLS`: a schema model, a description and a
handler, e.g. for a guest operation ``clipboard_get``::

    class ClipboardGet(SandboxRef):
        selection: Literal["clipboard", "primary"] = "clipboard"

    def _clipboard_get(desktops, args):
        result = desktops.run(
            args.sandbox_id, lambda d: d.client.clipboard_get(selection=args.selection).result
        )
        return [_text(str(result["text"]))]

    ToolSpec("clipboard_get", "Read the sandbox's clipboard.", ClipboardGet, _clipboard_get)

A handler works on the desktop's own connection (``desktops.run``), never a new one: a VM's
channel takes one connection at a time. Host paths never come from the arguments as they are:
``upload`` and ``download`` take them relative to the server's files folder
(:mod:`cubicle.orchestrator.mcp.files`), which refuses any way out of it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from mcp import types
from pydantic import BaseModel

from cubicle.drivers.actions import PlannedAction, plan_action
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.receipts import Receipt
from cubicle.drivers.records import ActionRecord
from cubicle.orchestrator import file_transfer
from cubicle.orchestrator.mcp import schemas as S
from cubicle.orchestrator.mcp.desktops import Desktop, Desktops
from cubicle.orchestrator.provider import ExecResult

__all__ = ["TOOLS", "Content", "ToolSpec", "tool_named"]

Content = types.TextContent | types.ImageContent
Handler = Callable[[Desktops, Any], Sequence[Content]]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what it does (for the model), its arguments and its handler."""

    name: str
    description: str
    model: type[BaseModel]
    handler: Handler
    read_only: bool = False

    def listing(self) -> types.Tool:
        """The tool as ``tools/list`` shows it."""
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=S.input_schema(self.model),
            annotations=types.ToolAnnotations(read_only_hint=self.read_only),
        )


def _text(text: str) -> types.TextContent:
    return types.TextContent(text=text)


# -- sandboxes -------------------------------------------------------------------------------


def _create(desktops: Desktops, args: S.CreateSandbox) -> Sequence[Content]:
    desktop = desktops.create(args.backend, args.network, args.screen)
    width, height = desktop.screen
    return [
        _text(
            f"Created a {desktop.sandbox.backend} sandbox: screen {width}x{height}, network "
            f"{desktop.network}. Pass its id as sandbox_id to the other tools. "
            f"Id: {desktop.sandbox.id}"
        )
    ]


def _list(desktops: Desktops, _args: S.NoArguments) -> Sequence[Content]:
    items = desktops.all()
    if not items:
        return [_text("No sandboxes; create one with create_sandbox.")]
    lines = [
        f"{d.sandbox.id}  {d.sandbox.backend}  {d.screen[0]}x{d.screen[1]}  network {d.network}"
        for d in items
    ]
    return [_text("\n".join(lines))]


def _destroy(desktops: Desktops, args: S.SandboxRef) -> Sequence[Content]:
    desktops.destroy(args.sandbox_id)
    return [_text(f"Removed {args.sandbox_id}.")]


# -- the screen ------------------------------------------------------------------------------


def _screenshot(desktops: Desktops, args: S.SandboxRef) -> Sequence[Content]:
    def shoot(desktop: Desktop) -> bytes:
        records: list[ActionRecord] = []
        desktop.driver.on_action = records.append
        try:
            desktop.driver.screenshot()
        finally:
            desktop.driver.on_action = None
        image = records[-1].image
        assert image is not None  # a done screenshot record carries its PNG
        return image

    png = desktops.run(args.sandbox_id, shoot)
    data = base64.b64encode(png).decode("ascii")
    return [types.ImageContent(data=data, mime_type="image/png")]


def describe_receipt(receipt: Receipt | None) -> str:
    """One line saying what the screen did after an action (for the model)."""
    if receipt is None:
        return ""
    said = "the screen changed" if receipt.changed else "the screen did not change visibly"
    said += f"; settled in {receipt.settle_ms} ms" if receipt.settled else "; still changing"
    if receipt.focus_after is not None and receipt.focus_after.title:
        focus = json.dumps(receipt.focus_after.title, ensure_ascii=False)
        said += f"; focused window {focus}"
        if receipt.focus_changed:
            said += " (the focus moved)"
    return said + "."


def _perform(
    desktops: Desktops,
    sandbox_id: str,
    kind: str,
    planner: Callable[[Any], PlannedAction],
) -> Sequence[Content]:
    def act(desktop: Desktop) -> ActionRecord:
        records: list[ActionRecord] = []
        driver: GuestDriver = desktop.driver
        driver.on_action = records.append
        try:
            driver.perform(kind, planner)
        finally:
            driver.on_action = None
        return records[-1]

    record = desktops.run(sandbox_id, act)
    where = ""
    if record.model_points:
        where = " at " + ", ".join(f"({x}, {y})" for x, y in record.model_points)
    receipt = describe_receipt(record.receipt)
    return [
        _text(f"{kind} done{where}." + (f" {receipt}" if receipt else "")),
    ]


def _action(kind: str) -> Handler:
    """The handler of input action ``kind`` (the tool's fields are the action's)."""

    def handle(desktops: Desktops, args: S.SandboxRef) -> Sequence[Content]:
        action: Mapping[str, Any] = args.model_dump(exclude={"sandbox_id"}, exclude_none=True)
        return _perform(
            desktops,
            args.sandbox_id,
            kind,
            lambda geometry: plan_action(kind, action, geometry),
        )

    return handle


def _wait(desktops: Desktops, args: S.Wait) -> Sequence[Content]:
    return _perform(
        desktops,
        args.sandbox_id,
        "wait",
        lambda geometry: PlannedAction("wait", None, {"ms": args.ms}, (), (), geometry),
    )


# -- programs --------------------------------------------------------------------------------


def exec_text(result: ExecResult) -> str:
    """An exec result as text: the exit, then each non-empty stream."""
    parts = ["timed out (killed)" if result.timed_out else f"exit code {result.exit_code}"]
    for name, text, cut in (
        ("stdout", result.stdout, result.stdout_truncated),
        ("stderr", result.stderr, result.stderr_truncated),
    ):
        if text or cut:
            parts.append(f"--- {name}{' (truncated)' if cut else ''} ---\n{text}")
    return "\n".join(parts)


def _exec(desktops: Desktops, args: S.Exec) -> Sequence[Content]:
    result = desktops.run(args.sandbox_id, lambda d: d.exec(args.argv, args.timeout_s))
    return [_text(exec_text(result))]


# -- files and the clipboard -----------------------------------------------------------------


def _counted(files: int, size: int) -> str:
    return f"{files} file{'' if files == 1 else 's'}, {size} bytes"


def _upload(desktops: Desktops, args: S.Upload) -> Sequence[Content]:
    source = desktops.files.source(args.local, "local")
    copied = desktops.run(
        args.sandbox_id, lambda d: file_transfer.upload(d.client, source, args.guest_path)
    )
    return [
        _text(f"Uploaded {args.local} to {copied.path} ({_counted(copied.files, copied.bytes)}).")
    ]


def _download(desktops: Desktops, args: S.Download) -> Sequence[Content]:
    target = desktops.files.destination(args.local, "local")
    copied = desktops.run(
        args.sandbox_id, lambda d: file_transfer.download(d.client, args.guest_path, target)
    )
    return [
        _text(
            f"Downloaded {args.guest_path} to {desktops.files.relative(copied.path)} in the files "
            f"folder ({_counted(copied.files, copied.bytes)}; on the host: {copied.path})."
        )
    ]


def _clipboard_get(desktops: Desktops, args: S.ClipboardGet) -> Sequence[Content]:
    result = desktops.run(
        args.sandbox_id, lambda d: d.client.clipboard_get(selection=args.selection).result
    )
    return [_text(str(result["text"]))]


def _clipboard_set(desktops: Desktops, args: S.ClipboardSet) -> Sequence[Content]:
    desktops.run(
        args.sandbox_id, lambda d: d.client.clipboard_set(args.text, selection=args.selection)
    )
    return [_text(f"The {args.selection} selection holds the text ({len(args.text)} characters).")]


_COORDS = (
    " Coordinates are pixels of the last screenshot (take one first). The result says whether "
    "the screen changed and which window has the focus."
)

TOOLS: Final[tuple[ToolSpec, ...]] = (
    ToolSpec(
        "create_sandbox",
        "Start a new disposable Linux desktop (a sandbox). Every argument is optional. "
        "The result's last word is the new sandbox's id.",
        S.CreateSandbox,
        _create,
    ),
    ToolSpec(
        "list_sandboxes",
        "List the sandboxes this server created: id, backend, screen, network.",
        S.NoArguments,
        _list,
        read_only=True,
    ),
    ToolSpec("destroy_sandbox", "Remove a sandbox and everything in it.", S.SandboxRef, _destroy),
    ToolSpec(
        "screenshot",
        "Capture the sandbox's screen (PNG). Coordinates of the other tools refer to it.",
        S.SandboxRef,
        _screenshot,
        read_only=True,
    ),
    ToolSpec("click", "Click a mouse button at a point." + _COORDS, S.Click, _action("click")),
    ToolSpec(
        "double_click",
        "Double-click the left button at a point." + _COORDS,
        S.DoubleClick,
        _action("double_click"),
    ),
    ToolSpec(
        "drag",
        "Press the left button at the path's first point, move through it, release at the last."
        + _COORDS,
        S.Drag,
        _action("drag"),
    ),
    ToolSpec(
        "scroll",
        "Scroll at a point by scroll_x/scroll_y pixels." + _COORDS,
        S.Scroll,
        _action("scroll"),
    ),
    ToolSpec("move", "Move the pointer to a point." + _COORDS, S.Move, _action("move")),
    ToolSpec(
        "type",
        "Type text with the keyboard into the focused window ('\\n' presses Enter).",
        S.Type,
        _action("type"),
    ),
    ToolSpec(
        "keypress",
        'Press a key chord, e.g. ["CTRL", "S"] or ["ENTER"].',
        S.Keypress,
        _action("keypress"),
    ),
    ToolSpec("wait", "Wait ms milliseconds (e.g. for a program to start).", S.Wait, _wait),
    ToolSpec(
        "exec",
        'Run a program in the sandbox as the desktop user (no shell; use ["sh", "-c", '
        "SCRIPT] for one) and return its exit code, stdout and stderr.",
        S.Exec,
        _exec,
    ),
    ToolSpec(
        "upload",
        "Copy a file or folder from the server's files folder (local, relative to it) into the "
        "sandbox at guest_path; bytes, modes and modification times kept.",
        S.Upload,
        _upload,
    ),
    ToolSpec(
        "download",
        "Copy a file or folder out of the sandbox (guest_path) into the server's files folder "
        "(local, relative to it; default: the folder itself, under the file's own name).",
        S.Download,
        _download,
    ),
    ToolSpec(
        "clipboard_get",
        "Read the text of the sandbox's clipboard (or primary selection); the result is the "
        "text exactly, empty when nothing holds text.",
        S.ClipboardGet,
        _clipboard_get,
        read_only=True,
    ),
    ToolSpec(
        "clipboard_set",
        "Put text on the sandbox's clipboard (or primary selection), so a paste (Ctrl+V) in "
        "any application receives it.",
        S.ClipboardSet,
        _clipboard_set,
    ),
)
"""Every tool, in the order ``tools/list`` shows them."""

_BY_NAME: Final = {tool.name: tool for tool in TOOLS}


def tool_named(name: str) -> ToolSpec | None:
    """The tool called ``name``, or None."""
    return _BY_NAME.get(name)
