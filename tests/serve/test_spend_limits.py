"""Session spending limits through the real ``openai`` client: ``cubicle serve --prices FILE``,
a Responses model (the scripted model through ``OPENAI_BASE_URL``) whose responses carry usage.

Prices: 1 USD per million input tokens, so a response of 1,000,000 input tokens costs 100 cents.
The session's limit is 150 cents: the first turn (100 + 60 cents) reaches it at its final
message — the turn completes, the session pauses (``budget_reached``, with the event); a message
is refused until ``sessions.update`` raises the limit; the next turn runs; one more limit reached
after a computer call cancels that turn before the call runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import openai
import pytest

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator import labels as L
from tests.orchestrator.conftest import engine
from tests.orchestrator.support import leftovers
from tests.serve.conftest import start_server
from tests.serve.support import DRILL_ENV, types

__all__ = ["engine"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PRICES = """
[models."gpt-test"]
input = 1.0
output = 4.0
"""


def _usage(tokens_in: int, tokens_out: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "total_tokens": tokens_in + tokens_out,
    }


def _turn(client: openai.OpenAI, session_id: str, text: str) -> list[Any]:
    with client.beta.agents.sessions.stream(session_id, input=text) as stream:
        return list(stream)  # the SDK ends it at idle, failed or budget_reached


def test_a_session_pauses_at_its_limit_and_resumes_after_an_update(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    move = {"computer_call": {"actions": [{"type": "move", "x": 100, "y": 100}]}}
    script = {
        "name": "serve-spend",
        "turns": [
            {**move, "usage": _usage(1_000_000)},  # 100 cents
            {"message": "first", "usage": _usage(500_000, 25_000)},  # 50 + 10 cents: 160
            {"message": "second", "usage": _usage(100_000)},  # 10 cents: 170
            {**move, "usage": _usage(100_000)},  # 10 cents: 180, over the new limit
            {"message": "never", "usage": _usage(1)},
        ],
    }
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES, encoding="utf-8")
    with ScriptedModel(parse_script(script), raise_on_exit=False) as model:
        server = start_server(
            tmp_path / "serve",
            "--prices",
            str(prices),
            env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model.base_url},
        )
        try:
            client = server.client()
            # a model without a price cannot have a limit: refused naming the model
            with pytest.raises(openai.BadRequestError) as refused:
                client.beta.agents.sessions.create(
                    environment=DRILL_ENV,
                    agent={"model": "gpt-unpriced"},
                    spend_control={"limit": 150},
                )
            assert "'gpt-unpriced'" in refused.value.message
            session = client.beta.agents.sessions.create(
                environment=DRILL_ENV, agent={"model": "gpt-test"}, spend_control={"limit": 150}
            )
            assert (session.spend_control.limit, session.spend_control.consumed) == (150, 0)

            events = _turn(client, session.id, "Move.")
            assert types(events)[-2:] == [
                "agent.session.turn.completed",
                "agent.session.budget_reached",
            ]
            paused = events[-1]
            assert paused.session.status == "budget_reached"
            assert paused.session.spend_control.consumed == 160
            completed = events[-2]
            assert completed.turn.usage is not None
            assert (completed.turn.usage.input_tokens, completed.turn.usage.output_tokens) == (
                1_500_000,
                25_000,
            )
            with pytest.raises(openai.BadRequestError) as blocked:
                client.beta.agents.sessions.events.create(
                    session.id,
                    events=[
                        {
                            "type": "agent.session.input.message",
                            "input": [
                                {"role": "user", "content": [{"type": "input_text", "text": "x"}]}
                            ],
                        }
                    ],
                )
            assert blocked.value.body["code"] == "budget_reached"  # type: ignore[index]

            updated = client.beta.agents.sessions.update(session.id, spend_control={"limit": 175})
            assert updated.status == "idle"
            assert (updated.spend_control.limit, updated.spend_control.consumed) == (175, 160)
            events = _turn(client, session.id, "Again.")
            assert types(events)[-2:] == ["agent.session.turn.completed", "agent.session.idle"]
            assert client.beta.agents.sessions.retrieve(session.id).spend_control.consumed == 170

            # reached after a computer call: the turn stops before the call runs
            events = _turn(client, session.id, "Move again.")
            assert types(events)[-2:] == [
                "agent.session.turn.cancelled",
                "agent.session.budget_reached",
            ]
            assert model.turns_served == 4  # the final turn was never requested
            final = client.beta.agents.sessions.retrieve(session.id)
            assert final.status == "budget_reached" and final.spend_control.consumed == 180
            assert final.usage is not None and final.usage.input_tokens == 1_700_000
            # a null limit removes it: the session resumes
            resumed = client.beta.agents.sessions.update(session.id, spend_control=None)
            assert resumed.status == "idle" and resumed.spend_control.limit is None
            client.beta.agents.sessions.delete(session.id)
        finally:
            server.stop()
        assert leftovers(engine, {L.OWNER_PID: str(server.process.pid)}) == []
