"""An OpenAI Agents SDK ``Agent`` whose computer is a cubicle desktop.

Offline (no key, no network: a scripted model on 127.0.0.1 plays the model's side)::

    python examples/agents_sdk.py

With a real model (reads ``OPENAI_API_KEY``; the model defaults to ``$CUBICLE_MODEL`` or
gpt-5.4, which uses the GA ``computer`` tool; ``computer-use-preview`` works too)::

    OPENAI_API_KEY=sk-... python examples/agents_sdk.py "Open the editor and write a haiku"

Needs ``pip install 'cubicle[agents]'``, Docker and the guest image (``make image``). The run is
recorded like ``cubicle run`` records its own: ``--out`` gets ``trajectory.jsonl``, the
screenshots and ``report.html``. Safety checks are decided by ``--policy FILE`` (a
``cubicle/drivers/policy_file.py`` policy, which also decides every action), else by a terminal
prompt when stdin is a terminal, else denied; the offline script's one check is approved by its
policy.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from agents import Agent, ComputerTool, ModelSettings, OpenAIResponsesModel, RunConfig, Runner

from cubicle.drivers import (
    FilePolicy,
    GuestDriver,
    NonInteractive,
    TerminalPrompt,
    Viewport,
    load_policy,
)
from cubicle.drivers.agents_computer import CubicleComputer
from cubicle.drivers.approvals import ApprovalPolicy
from cubicle.drivers.policy_file import parse_policy
from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.agents_run import AgentsRunRecording
from cubicle.orchestrator.sandbox import Sandbox

VIEW = Viewport.fit(1024, 640)  # what the model sees of the 1280x800 screen

OFFLINE_SCRIPT = {
    "name": "agents-example",
    "model_view": {"width": 1024, "height": 640},
    "turns": [
        {
            "computer_call": {
                # the middle of the model's 1024x640 view is screen pixel (640, 400)
                "actions": [
                    {"type": "move", "x": 512, "y": 320},
                    {"type": "click", "button": "left", "x": 512, "y": 320},
                ],
                "pending_safety_checks": [
                    {"id": "sc_1", "code": "irrelevant_domain", "message": "Confirm the click."}
                ],
            }
        },
        {"computer_call": {"actions": [{"type": "keypress", "keys": ["ctrl", "l"]}]}},
        {"message": "Done."},
    ],
}
OFFLINE_POLICY = """
version = 1
default = "allow"
[[check]]
decision = "allow"
codes = ["irrelevant_domain"]
"""


def run(
    task: str,
    *,
    model: str,
    base_url: str,
    api_key: str,
    policy: ApprovalPolicy,
    out: Path,
    network: str = "none",
    max_turns: int = 30,
) -> str:
    """Run ``task`` on a fresh sandbox; return the agent's final output. The sandbox is
    destroyed on the way out, whatever happens."""
    with (
        Sandbox.create("docker", network=network, screen=(1280, 800)) as sandbox,
        AgentsRunRecording(
            out,
            task=task,
            model=model,
            safety_policy=policy,
            # a policy file decides every action too; a terminal prompt only the safety checks
            action_policy=policy if isinstance(policy, FilePolicy) else None,
        ) as recording,
        sandbox.connect() as client,
        GuestDriver(client, viewport=VIEW, on_action=recording.on_action) as driver,
        CubicleComputer(driver, before_action=recording.before_action) as computer,
    ):
        agent = Agent(
            name="desktop",
            instructions="You operate a Linux desktop through the computer tool.",
            model=OpenAIResponsesModel(
                model, recording.openai_client(base_url=base_url, api_key=api_key)
            ),
            # the preview model requires truncation="auto"; GA models take it too
            model_settings=ModelSettings(truncation="auto"),
            tools=[ComputerTool(computer=computer, on_safety_check=recording.on_safety_check)],
        )
        recording.begin(driver)
        # tracing off: the SDK's traces would carry the screenshots to the tracing backend
        result = Runner.run_sync(
            agent, task, max_turns=max_turns, run_config=RunConfig(tracing_disabled=True)
        )
        recording.finish(result.final_output)
        return str(result.final_output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("task", nargs="?", default="Click the middle of the screen.")
    parser.add_argument(
        "--out", type=Path, default=Path(f"runs/agents-{time.strftime('%Y%m%d-%H%M%S')}")
    )
    parser.add_argument("--policy", type=Path, help="approval policy file (TOML)")
    parser.add_argument("--network", default="none", help="none, open, or allow:HOST[:PORT],...")
    args = parser.parse_args(argv)
    key = os.environ.get("OPENAI_API_KEY")
    if args.policy is not None:
        policy: ApprovalPolicy = FilePolicy(load_policy(args.policy))
    elif key and sys.stdin.isatty():
        policy = TerminalPrompt(sys.stdin, sys.stderr)
    elif key:
        policy = NonInteractive("stdin is not a terminal; pass --policy FILE to approve")
    else:
        policy = FilePolicy(parse_policy(OFFLINE_POLICY))
    if key:
        model = os.environ.get("CUBICLE_MODEL", "gpt-5.4")
        base_url = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        final = run(
            args.task,
            model=model,
            base_url=base_url,
            api_key=key,
            policy=policy,
            out=args.out,
            network=args.network,
        )
    else:
        with ScriptedModel(parse_script(OFFLINE_SCRIPT)) as scripted:
            final = run(
                args.task,
                model="scripted",
                base_url=scripted.base_url,
                api_key="offline",
                policy=policy,
                out=args.out,
                network=args.network,
            )
            scripted.assert_finished()
    print(final)
    for decision in policy.log:
        print(decision.subject, decision.action, decision.approved, decision.native_points)
    print(f"report: {args.out / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
