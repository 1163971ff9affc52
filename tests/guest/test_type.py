"""``type`` produces exactly the given Unicode text in a real window and a real text widget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError
from cubicle_guest.protocol import MAX_TEXT_CHARS
from tests.support.recorder import Recorder
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11

TEXTS = [
    "hello world",
    "<",
    "-",
    "-rf --force",
    '<div class="x">a & b</div>',
    "Grêmio",
    "日本",
    "line one\nline two\n",
    "col\tcol\tcol",
    'MiXeD CaSe ABC xyz !@#$%^&*()_+{}|:"<>?~',
    "`1234567890-=[]\\;',./",
    "Ça coûte 5 € — naïve façade, Straße, Ærø",
    "Привет, мир; \u03b3\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5; שלום",  # Greek, escaped for ruff
    "日本語のテキスト、漢字とかな",
    "✓ ✗ → ≠ ∞",
]


@pytest.mark.parametrize("text", [*TEXTS, "🙂 non-BMP 𝄞"])
def test_type_delivers_exact_characters(client: AgentClient, recorder: Recorder, text: str) -> None:
    client.type(text)
    recorder.wait_until(
        lambda evs: sum(e.kind == "KeyRelease" and e.char is not None for e in evs) >= len(text),
        what=f"{len(text)} chars",
    )
    assert recorder.text() == text


class TkText:
    """A running tk_text.py process (owned by the fixture, stopped by pid)."""

    def __init__(self, display: str) -> None:
        env = {**os.environ, "DISPLAY": display, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("tk_text.py"))],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"tk text widget did not start: {line!r}")

    def command(self, name: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(name + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def content(self, expected: str, timeout: float = 5.0) -> str:
        """The widget's text, polled until it equals ``expected`` or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            value: str = json.loads(self.command("get"))
            if value == expected or time.monotonic() > deadline:
                return value
            time.sleep(0.05)

    def stop(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def tk_text(xserver: Xvfb) -> Iterator[TkText]:
    widget = TkText(xserver.display)
    try:
        yield widget
    finally:
        widget.stop()


@pytest.mark.parametrize("text", TEXTS)
def test_type_into_real_tk_text_widget(client: AgentClient, tk_text: TkText, text: str) -> None:
    assert tk_text.command("clear") == "ok"
    assert tk_text.command("focus") == "ok"
    client.type(text)
    assert tk_text.content(text) == text


def test_type_many_distinct_unmapped_characters_in_one_request(
    client: AgentClient, tk_text: TkText
) -> None:
    # more distinct non-layout characters than there are spare keycodes: forces re-binding
    text = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 40))
    assert tk_text.command("clear") == "ok"
    assert tk_text.command("focus") == "ok"
    client.type(text)
    assert tk_text.content(text) == text


def test_oversized_text_is_refused_and_nothing_typed(
    client: AgentClient, recorder: Recorder
) -> None:
    with pytest.raises(GuestError) as caught:
        client.type("a" * (MAX_TEXT_CHARS + 1))
    assert caught.value.code == "too_large"
    assert str(MAX_TEXT_CHARS) in caught.value.reason
    client.move(9, 9)
    recorder.wait_for(lambda e: e.kind == "MotionNotify" and e.root_x == 9)
    assert recorder.key_events() == []


def test_empty_text_types_nothing(client: AgentClient, recorder: Recorder) -> None:
    client.type("")
    client.move(8, 8)
    recorder.wait_for(lambda e: e.kind == "MotionNotify" and e.root_x == 8)
    assert recorder.key_events() == []


def test_type_is_exact_with_caps_lock_on(client: AgentClient, tk_text: TkText) -> None:
    assert tk_text.command("clear") == "ok"
    assert tk_text.command("focus") == "ok"
    client.keypress(["CapsLock"])
    try:
        client.type("aB cD 1!")
        assert tk_text.content("aB cD 1!") == "aB cD 1!"
        client.keypress(["x"])  # Caps Lock is still on for other input
        assert tk_text.content("aB cD 1!X") == "aB cD 1!X"
    finally:
        client.keypress(["CapsLock"])
