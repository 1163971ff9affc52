"""Run trajectories: a recorder writing ``trajectory.jsonl`` + screenshots, and an HTML report."""

from __future__ import annotations

from cubicle.orchestrator.trajectory.recorder import (
    TRAJECTORY_FILE,
    TrajectoryRecorder,
    read_trajectory,
)
from cubicle.orchestrator.trajectory.report import REPORT_FILE, render_report, write_report

__all__ = [
    "REPORT_FILE",
    "TRAJECTORY_FILE",
    "TrajectoryRecorder",
    "read_trajectory",
    "render_report",
    "write_report",
]
