"""Typed methods for every operation of the protocol, shared by the sync client
(:class:`cubicle_guest.client.AgentClient`, returning a :class:`~cubicle_guest.protocol.Reply`)
and the async one (``cubicle.drivers.async_client.AsyncAgentClient``, returning an awaitable of
one).

Each method is one entry of :data:`cubicle_guest.protocol.OPS`: its keyword parameters are the
operation's arguments (``None``: not sent, the agent's default), plus ``blob`` where the
operation takes one and ``timeout`` (seconds for the whole round trip; default: the client's).
tests/guest/test_client_ops.py checks that the methods and the table name the same operations
and arguments, so a new operation or argument cannot be added to one and forgotten in the other.
Coordinates are native screen pixels; times are milliseconds except ``timeout``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["AgentOps", "Point", "Region", "Settle"]

R = TypeVar("R")

Point = Mapping[str, int]
"""``{"x": int, "y": int}``, native screen pixels."""
Region = Mapping[str, int]
"""``{"x", "y", "width", "height"}``, native screen pixels."""
Settle = Mapping[str, int | None]
"""An action's ``settle`` (:class:`cubicle_guest.protocol.SettleSpec`'s fields, milliseconds);
``None`` turns an optional one off (``typing_quiet_ms``, ``idle_quiet_ms``, ``launch_cap_ms``)."""


def _args(**values: Any) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


class AgentOps(Generic[R]):
    """The operations as methods over :meth:`call` (which the client defines)."""

    def call(
        self,
        op: str,
        args: Mapping[str, Any] | None = None,
        *,
        blob: bytes = b"",
        timeout: float | None = None,
    ) -> R:
        raise NotImplementedError

    # -- introspection ---------------------------------------------------------------------

    def info(self, *, timeout: float | None = None) -> R:
        """``protocol``, ``agent_version``, ``screen``, ``ops``, ``features`` … of the agent."""
        return self.call("info", {}, timeout=timeout)

    # -- actions -----------------------------------------------------------------------------

    def click(
        self,
        x: int,
        y: int,
        *,
        button: str | None = None,
        count: int | None = None,
        keys: Sequence[str] | None = None,
        settle: Settle | None = None,
        timeout: float | None = None,
    ) -> R:
        return self.call(
            "click",
            _args(x=x, y=y, button=button, count=count, keys=keys, settle=settle),
            timeout=timeout,
        )

    def double_click(
        self,
        x: int,
        y: int,
        *,
        keys: Sequence[str] | None = None,
        settle: Settle | None = None,
        timeout: float | None = None,
    ) -> R:
        return self.call("double_click", _args(x=x, y=y, keys=keys, settle=settle), timeout=timeout)

    def move(
        self,
        x: int,
        y: int,
        *,
        keys: Sequence[str] | None = None,
        settle: Settle | None = None,
        timeout: float | None = None,
    ) -> R:
        return self.call("move", _args(x=x, y=y, keys=keys, settle=settle), timeout=timeout)

    def drag(
        self,
        path: Sequence[Point],
        *,
        keys: Sequence[str] | None = None,
        settle: Settle | None = None,
        timeout: float | None = None,
    ) -> R:
        return self.call(
            "drag", _args(path=[dict(p) for p in path], keys=keys, settle=settle), timeout=timeout
        )

    def scroll(
        self,
        x: int,
        y: int,
        scroll_x: int,
        scroll_y: int,
        *,
        keys: Sequence[str] | None = None,
        settle: Settle | None = None,
        timeout: float | None = None,
    ) -> R:
        args = _args(x=x, y=y, scroll_x=scroll_x, scroll_y=scroll_y, keys=keys, settle=settle)
        return self.call("scroll", args, timeout=timeout)

    def keypress(
        self,
        keys: Sequence[str],
        *,
        settle: Settle | None = None,
        timeout: float | None = None,
    ) -> R:
        return self.call("keypress", _args(keys=list(keys), settle=settle), timeout=timeout)

    def type(self, text: str, *, settle: Settle | None = None, timeout: float | None = None) -> R:
        return self.call("type", _args(text=text, settle=settle), timeout=timeout)

    def wait(self, *, ms: int | None = None, timeout: float | None = None) -> R:
        return self.call("wait", _args(ms=ms), timeout=timeout)

    def mouse_down(
        self,
        *,
        button: str | None = None,
        settle: Mapping[str, int] | None = None,
        timeout: float | None = None,
    ) -> R:
        """Press ``button`` (default left) at the pointer; it stays down until ``mouse_up``."""
        return self.call("mouse_down", _args(button=button, settle=settle), timeout=timeout)

    def mouse_up(
        self,
        *,
        button: str | None = None,
        settle: Mapping[str, int] | None = None,
        timeout: float | None = None,
    ) -> R:
        return self.call("mouse_up", _args(button=button, settle=settle), timeout=timeout)

    def hold_keys(
        self,
        keys: Sequence[str],
        ms: int,
        *,
        settle: Mapping[str, int] | None = None,
        timeout: float | None = None,
    ) -> R:
        """Hold the chord ``keys`` for ``ms`` milliseconds, released before the reply."""
        return self.call("hold_keys", _args(keys=list(keys), ms=ms, settle=settle), timeout=timeout)

    def pointer(self, *, timeout: float | None = None) -> R:
        """Where the pointer is: ``x``, ``y`` (native pixels)."""
        return self.call("pointer", {}, timeout=timeout)

    def release_all(self, *, timeout: float | None = None) -> R:
        """Release every key and button still held; ``released`` names them."""
        return self.call("release_all", {}, timeout=timeout)

    # -- observation -------------------------------------------------------------------------

    def screenshot(
        self,
        *,
        format: str | None = None,
        quality: int | None = None,
        max_width: int | None = None,
        max_height: int | None = None,
        region: Region | None = None,
        timeout: float | None = None,
    ) -> R:
        """The screen (or ``region`` of it) as PNG or JPEG: the image is the reply's blob."""
        args = _args(
            format=format,
            quality=quality,
            max_width=max_width,
            max_height=max_height,
            region=None if region is None else dict(region),
        )
        return self.call("screenshot", args, timeout=timeout)

    def settle(
        self,
        *,
        quiet_ms: int | None = None,
        timeout_ms: int | None = None,
        region: Region | None = None,
        until_idle: bool | None = None,
        timeout: float | None = None,
    ) -> R:
        args = _args(
            quiet_ms=quiet_ms,
            timeout_ms=timeout_ms,
            region=None if region is None else dict(region),
            until_idle=until_idle,
        )
        return self.call("settle", args, timeout=timeout)

    def windows(self, *, timeout: float | None = None) -> R:
        """The desktop's windows (``windows``: id, title, wm_class, type, geometry, focused)."""
        return self.call("windows", {}, timeout=timeout)

    # -- orchestration helpers -----------------------------------------------------------------

    def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
    ) -> R:
        """Run ``argv`` in the guest as the desktop user (never through a shell)."""
        args = _args(
            argv=list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            timeout_ms=timeout_ms,
            stdin=stdin,
        )
        return self.call("exec", args, timeout=timeout)

    def read_file(
        self, path: str, *, max_bytes: int | None = None, timeout: float | None = None
    ) -> R:
        """The guest file's bytes (the reply's blob)."""
        return self.call("read_file", _args(path=path, max_bytes=max_bytes), timeout=timeout)

    def write_file(
        self,
        path: str,
        blob: bytes,
        *,
        mode: int | None = None,
        mkdirs: bool | None = None,
        timeout: float | None = None,
    ) -> R:
        """Write ``blob`` to the guest file ``path`` as the desktop user."""
        return self.call(
            "write_file", _args(path=path, mode=mode, mkdirs=mkdirs), blob=blob, timeout=timeout
        )

    # -- chunked file transfer (feature "files"; cubicle.orchestrator.file_transfer drives them) --

    def file_stat(self, path: str, *, timeout: float | None = None) -> R:
        """``path`` (absolute) and ``kind`` (``file``, ``dir``, ``symlink``, ``other``, None)."""
        return self.call("file_stat", {"path": path}, timeout=timeout)

    def put_begin(
        self,
        path: str,
        kind: str,
        mode: int,
        mtime_ns: int,
        *,
        size: int | None = None,
        timeout: float | None = None,
    ) -> R:
        """Start an upload of a ``file`` or ``dir`` to ``path``: the reply's ``handle``."""
        args = _args(path=path, kind=kind, mode=mode, mtime_ns=mtime_ns, size=size)
        return self.call("put_begin", args, timeout=timeout)

    def put_mkdir(
        self, handle: str, name: str, mode: int, mtime_ns: int, *, timeout: float | None = None
    ) -> R:
        args = {"handle": handle, "name": name, "mode": mode, "mtime_ns": mtime_ns}
        return self.call("put_mkdir", args, timeout=timeout)

    def put_chunk(
        self,
        handle: str,
        name: str,
        offset: int,
        blob: bytes,
        *,
        last: bool | None = None,
        mode: int | None = None,
        mtime_ns: int | None = None,
        timeout: float | None = None,
    ) -> R:
        args = _args(handle=handle, name=name, offset=offset, last=last, mode=mode)
        args.update(_args(mtime_ns=mtime_ns))
        return self.call("put_chunk", args, blob=blob, timeout=timeout)

    def put_commit(self, handle: str, *, timeout: float | None = None) -> R:
        return self.call("put_commit", {"handle": handle}, timeout=timeout)

    def put_abort(self, handle: str, *, timeout: float | None = None) -> R:
        return self.call("put_abort", {"handle": handle}, timeout=timeout)

    def get_list(self, path: str, *, timeout: float | None = None) -> R:
        """A file's or a folder tree's description (``entries``; links not followed)."""
        return self.call("get_list", {"path": path}, timeout=timeout)

    def get_chunk(self, path: str, offset: int, length: int, *, timeout: float | None = None) -> R:
        """``length`` bytes of the file at ``offset`` (the reply's blob)."""
        args = {"path": path, "offset": offset, "length": length}
        return self.call("get_chunk", args, timeout=timeout)

    # -- the clipboard (feature "clipboard") ---------------------------------------------------

    def clipboard_get(self, *, selection: str | None = None, timeout: float | None = None) -> R:
        """``text`` of the selection (default ``clipboard``) and its ``owner``."""
        return self.call("clipboard_get", _args(selection=selection), timeout=timeout)

    def clipboard_set(
        self, text: str, *, selection: str | None = None, timeout: float | None = None
    ) -> R:
        """Make the agent own the selection (default ``clipboard``) with ``text``."""
        return self.call("clipboard_set", _args(text=text, selection=selection), timeout=timeout)

    # -- sign-in (feature "signin") ------------------------------------------------------------

    def browser_start(
        self,
        *,
        argv: Sequence[str] | None = None,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> R:
        """Start the agent's browser with its DevTools protocol on a pipe (or open ``url`` in
        it when running): ``pid``, ``started``."""
        args = _args(
            argv=None if argv is None else list(argv),
            url=url,
            env=None if env is None else dict(env),
        )
        return self.call("browser_start", args, timeout=timeout)

    def browser_stop(self, *, timeout: float | None = None) -> R:
        """End the browser ``browser_start`` started: ``stopped``."""
        return self.call("browser_stop", {}, timeout=timeout)

    def signin_find(self, *, timeout: float | None = None) -> R:
        """The sign-in form the agent's browser shows: ``form`` (None, or ``form_id``,
        ``credential_origin``, ``fields``, ``options``, ``title``)."""
        return self.call("signin_find", {}, timeout=timeout)

    def signin_fill(
        self,
        form_id: str,
        values: Mapping[str, str],
        *,
        option: str | None = None,
        timeout: float | None = None,
    ) -> R:
        """Write ``values`` (field id → value; secret) into the found form and submit it:
        ``filled``."""
        args = _args(form_id=form_id, values=dict(values), option=option)
        return self.call("signin_fill", args, timeout=timeout)
