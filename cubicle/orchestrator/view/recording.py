"""``--record``: a video of a run's screen, written beside its report (``DIR/recording.mp4``).

While the run goes on, a thread takes screenshots through its own agent connection
(:data:`DEFAULT_FPS` a second, JPEG) and keeps a frame only when the screen changed (identical
frames are dropped, so an idle desktop costs nothing but the polls). When the run ends, ffmpeg
(Debian's, on the host — the guest image does not grow) encodes the kept frames with their real
timing (a variable frame rate) as H.264 capped at ``kbps`` kilobits a second: the default
(:data:`DEFAULT_KBPS`) bounds a recording to about 20 MB an hour at 1280x800. The frames are
removed afterwards. What a person did during a hand-over is on the video like the rest.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from cubicle.orchestrator.errors import ConfigError
from cubicle_guest.client import AgentClient

__all__ = [
    "DEFAULT_FPS",
    "DEFAULT_KBPS",
    "RECORDING_FILE",
    "Recording",
    "RecordingResult",
    "add_record_argument",
    "parse_record",
    "recording_event",
]

RECORDING_FILE: Final = "recording.mp4"
DEFAULT_FPS: Final = 2.0
DEFAULT_KBPS: Final = 44
"""44 kbit/s ≈ 19.8 MB an hour."""
FRAMES_DIR: Final = "recording-frames"
ENCODE_TIMEOUT_S: Final = 600.0


class _Desktop(Protocol):
    def connect(self, timeout: float = 10.0) -> AgentClient: ...


@dataclass(frozen=True)
class RecordingResult:
    """What :meth:`Recording.stop` wrote (``file`` None when nothing could be encoded)."""

    file: Path | None
    frames: int
    duration_s: float
    bytes: int
    error: str | None = None


def add_record_argument(parser: Any, *, where: str) -> None:
    """``--record [fps=N,kbps=N]`` on a ``cubicle`` subcommand's parser (:func:`parse_record`)."""
    parser.add_argument(
        "--record",
        nargs="?",
        const="",
        default=None,
        metavar="fps=N,kbps=N",
        help=f"write a video of the screen beside {where} ({RECORDING_FILE}; default "
        f"fps={DEFAULT_FPS:g},kbps={DEFAULT_KBPS}: about 20 MB an hour)",
    )


def parse_record(text: str) -> tuple[float, int]:
    """``--record [fps=N,kbps=N]`` (any subset, or empty) → (fps, kbps).

    :raises ConfigError: naming the bad part; or ffmpeg is not installed on the host.
    """
    if shutil.which("ffmpeg") is None:
        raise ConfigError("--record needs ffmpeg on the host", hint="apt-get install ffmpeg")
    fps, kbps = DEFAULT_FPS, DEFAULT_KBPS
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        try:
            if key == "fps" and 0 < float(value) <= 30:
                fps = float(value)
                continue
            if key == "kbps" and 8 <= int(value) <= 100_000:
                kbps = int(value)
                continue
        except ValueError:
            pass
        raise ConfigError(
            f"bad recording option {part!r}: expected fps=N (0 < N <= 30) or kbps=N (8..100000)"
        )
    return fps, kbps


class Recording:
    """Record ``desktop``'s screen into ``out`` (see the module docstring).

    :raises ConfigError: at construction, when ffmpeg is not installed.
    """

    def __init__(
        self, desktop: _Desktop, out: Path, *, fps: float = DEFAULT_FPS, kbps: int = DEFAULT_KBPS
    ) -> None:
        self.ffmpeg = shutil.which("ffmpeg")
        if self.ffmpeg is None:
            raise ConfigError(
                "--record needs ffmpeg on the host", hint="apt-get install ffmpeg (Debian)"
            )
        self.desktop = desktop
        self.out = out
        self.fps = fps
        self.kbps = kbps
        self.frames: list[tuple[Path, float]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cubicle-recording", daemon=True)
        self._started = 0.0

    def start(self) -> Recording:
        (self.out / FRAMES_DIR).mkdir(parents=True, exist_ok=True)
        self._started = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        folder = self.out / FRAMES_DIR
        last = b""
        try:
            with self.desktop.connect() as client:
                while True:
                    reply = client.screenshot(format="jpeg", quality=80)
                    if reply.blob != last:
                        path = folder / f"{len(self.frames):06d}.jpg"
                        path.write_bytes(reply.blob)
                        self.frames.append((path, time.monotonic() - self._started))
                        last = reply.blob
                    if self._stop.wait(1.0 / self.fps):
                        return
        except Exception as exc:  # the sandbox went away mid-run: keep what was recorded
            if not self._stop.is_set():
                self.error = f"recording stopped: {exc}"

    def stop(self) -> RecordingResult:
        """Stop taking frames, encode them, remove them. Never raises for encoding trouble:
        the run's result matters more than its video (the reason is in ``error``)."""
        self._stop.set()
        self._thread.join()
        duration = time.monotonic() - self._started
        folder = self.out / FRAMES_DIR
        try:
            if not self.frames:
                return RecordingResult(None, 0, duration, 0, self.error or "no frame was taken")
            target = self.out / RECORDING_FILE
            error = self._encode(folder, target, duration)
            size = target.stat().st_size if error is None else 0
            return RecordingResult(
                target if error is None else None,
                len(self.frames),
                duration,
                size,
                error or self.error,
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _encode(self, folder: Path, target: Path, duration: float) -> str | None:
        lines = ["ffconcat version 1.0"]
        ends = [t for _, t in self.frames[1:]] + [max(duration, self.frames[-1][1] + 0.5)]
        for (path, start), end in zip(self.frames, ends, strict=True):
            lines += [f"file {path.name}", f"duration {max(end - start, 0.04):.3f}"]
        lines.append(f"file {self.frames[-1][0].name}")  # the concat demuxer's last-frame rule
        listing = folder / "frames.ffconcat"
        listing.write_text("\n".join(lines) + "\n")
        argv = [
            str(self.ffmpeg),
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "concat",
            "-i",
            str(listing),
            "-vf",
            "scale=trunc(iw/2)*2:trunc(ih/2)*2,format=yuv420p",
            "-fps_mode",
            "vfr",
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-crf",
            "30",
            "-maxrate",
            f"{self.kbps}k",
            "-bufsize",
            f"{2 * self.kbps}k",
            "-movflags",
            "+faststart",
            str(target),
        ]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=ENCODE_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            return f"ffmpeg did not finish within {ENCODE_TIMEOUT_S:.0f} s"
        if done.returncode != 0:
            with contextlib.suppress(OSError):
                target.unlink()
            return f"ffmpeg failed ({done.returncode}): {done.stderr.strip()[-400:]}"
        return None


def recording_event(result: RecordingResult, out: Path) -> dict[str, object]:
    """The trajectory's ``recording`` event fields (``file`` relative to ``out``)."""
    return {
        "file": result.file.relative_to(out).as_posix() if result.file else None,
        "frames": result.frames,
        "duration_s": round(result.duration_s, 2),
        "bytes": result.bytes,
        "error": result.error,
    }
