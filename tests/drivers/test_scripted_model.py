"""The scripted Responses stand-in, driven by the real ``openai`` client (no guest needed)."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from PIL import Image

from cubicle.drivers.errors import ScriptError, ScriptViolation
from cubicle.drivers.scripted_model import ScriptedModel, Turn, load_script, parse_script

SCRIPT: dict[str, Any] = {
    "name": "demo",
    "model_view": {"width": 64, "height": 36},
    "turns": [
        {
            "before": [{"op": "wait_window", "title": "Mousepad", "timeout_ms": 20000}],
            "computer_call": {
                "actions": [{"type": "click", "button": "left", "x": 32, "y": 18}],
                "pending_safety_checks": [
                    {"id": "sc_1", "code": "malicious_instructions", "message": "check it"}
                ],
            },
        },
        {"message": "Drill complete."},
    ],
}


def png_url(width: int, height: int) -> str:
    out = io.BytesIO()
    Image.new("RGB", (width, height)).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


@pytest.fixture
def client() -> Iterator[Callable[[ScriptedModel], openai.OpenAI]]:
    """Factory of real clients for a running model; all are closed at teardown."""
    made: list[openai.OpenAI] = []

    def make(model: ScriptedModel) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=model.base_url, api_key="drill", max_retries=0))
        return made[-1]

    yield make
    for each in made:
        each.close()


def second_turn_input(
    size: tuple[int, int],
    acknowledged: list[dict[str, Any]] | None = None,
    call_id: str = "call_demo_0001",
) -> list[Any]:
    return [
        {"role": "user", "content": "go"},
        {
            "type": "computer_call_output",
            "call_id": call_id,
            "output": {"type": "computer_screenshot", "image_url": png_url(*size)},
            "acknowledged_safety_checks": acknowledged
            if acknowledged is not None
            else [{"id": "sc_1", "code": "malicious_instructions", "message": "check it"}],
        },
    ]


def test_plays_the_script_and_hands_before_steps_to_the_hook(
    client: Callable[[ScriptedModel], openai.OpenAI],
) -> None:
    seen: list[tuple[int, Turn, dict[str, Any]]] = []
    with ScriptedModel(parse_script(SCRIPT), on_turn=lambda *args: seen.append(args)) as model:
        first = client(model).responses.create(model="m", input="go", tools=[{"type": "computer"}])
        second = client(model).responses.create(
            model="m", input=second_turn_input((64, 36)), tools=[{"type": "computer"}]
        )
        assert model.finished
    assert first.id == "resp_demo_0001"
    call = first.output[0]
    assert call.type == "computer_call"
    assert call.call_id == "call_demo_0001"
    assert call.pending_safety_checks[0].code == "malicious_instructions"
    assert first.usage is not None and first.usage.total_tokens == 0
    assert second.output_text == "Drill complete."
    assert [(i, t.before) for i, t, _ in seen] == [
        (0, ({"op": "wait_window", "title": "Mousepad", "timeout_ms": 20000},)),
        (1, ()),
    ]
    assert [r["model"] for r in model.requests] == ["m", "m"]


@pytest.mark.parametrize(
    ("request_input", "problem"),
    [
        (second_turn_input((64, 40)), "is 64x40, expected 64x36"),
        (second_turn_input((64, 36), acknowledged=[]), "acknowledged_safety_checks"),
        (second_turn_input((64, 36), call_id="call_other"), "answers 'call_other'"),
        ([{"role": "user", "content": "go"}], "the last input item is 'user'"),
    ],
    ids=["wrong-size", "not-acknowledged", "wrong-call-id", "no-output"],
)
def test_off_script_requests_fail_loudly(
    client: Callable[[ScriptedModel], openai.OpenAI], request_input: list[Any], problem: str
) -> None:
    model = ScriptedModel(parse_script(SCRIPT))
    with pytest.raises(ScriptViolation, match=problem), model:  # raised again on exit
        client(model).responses.create(model="m", input="go", tools=[{"type": "computer"}])
        with pytest.raises(openai.BadRequestError, match=problem):
            client(model).responses.create(
                model="m", input=request_input, tools=[{"type": "computer"}]
            )
        assert model.turns_served == 1  # the turn did not advance
    assert len(model.failures) == 1


def test_requests_past_the_end_are_refused(
    client: Callable[[ScriptedModel], openai.OpenAI],
) -> None:
    script = parse_script({"name": "short", "turns": [{"message": "hi"}]})
    model = ScriptedModel(script, raise_on_exit=False)
    with model:
        client(model).responses.create(model="m", input="go", tools=[{"type": "computer"}])
        with pytest.raises(openai.BadRequestError, match="past its end"):
            client(model).responses.create(model="m", input="again", tools=[{"type": "computer"}])
    assert isinstance(model.failures[0], ScriptViolation)


def test_a_failing_hook_answers_500_and_is_recorded(
    client: Callable[[ScriptedModel], openai.OpenAI],
) -> None:
    def hook(index: int, turn: Turn, body: dict[str, Any]) -> None:
        raise TimeoutError("window 'Mousepad' did not appear within 20 s")

    model = ScriptedModel(parse_script(SCRIPT), on_turn=hook, raise_on_exit=False)
    with model, pytest.raises(openai.InternalServerError, match="Mousepad"):
        client(model).responses.create(model="m", input="go", tools=[{"type": "computer"}])
    assert "on_turn hook failed" in str(model.failures[0])


def test_streaming_serves_created_items_completed(
    client: Callable[[ScriptedModel], openai.OpenAI],
) -> None:
    with ScriptedModel(parse_script(SCRIPT)) as model:
        events = list(
            client(model).responses.create(
                model="m", input="go", tools=[{"type": "computer"}], stream=True
            )
        )
        client(model).responses.create(
            model="m", input=second_turn_input((64, 36)), tools=[{"type": "computer"}]
        )
    assert [e.type for e in events] == [
        "response.created",
        "response.output_item.done",
        "response.completed",
    ]
    assert model.requests[0]["stream"] is True


def test_the_server_is_stopped_on_exit() -> None:
    with ScriptedModel(parse_script(SCRIPT), raise_on_exit=False) as model:
        url = model.base_url
    with (
        openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=5) as late,
        pytest.raises(openai.APIConnectionError),
    ):
        late.responses.create(model="m", input="go")


@pytest.mark.parametrize(
    ("mutate", "turn", "reason"),
    [
        (lambda s: s.pop("name"), None, "name must be a non-empty string"),
        (lambda s: s["turns"].pop(), 0, "the last turn must be a message"),
        (
            lambda s: s["turns"][0]["computer_call"]["actions"][0].update(type="zoom"),
            0,
            "actions[0]: unknown action type 'zoom'",
        ),
        (
            lambda s: s["turns"][0]["computer_call"]["actions"][0].pop("x"),
            0,
            "field 'x' is missing or invalid",
        ),
        (
            lambda s: s["turns"][1].update(computer_call={}),
            1,
            "exactly one of 'computer_call', 'function_call' or 'message'",
        ),
        (
            lambda s: s["turns"][0].update(expect={"screenshot_size": [0, 5]}),
            0,
            "expect.screenshot_size must be [width, height] positive integers",
        ),
        (lambda s: s["turns"][0].update(before=[{"title": "x"}]), 0, "string 'op'"),
        (lambda s: s.update(model_view={"width": 10}), None, "model_view must be"),
    ],
    ids=[
        "no-name",
        "ends-with-call",
        "unknown-action",
        "missing-field",
        "call-and-message",
        "bad-expect",
        "before-without-op",
        "bad-model-view",
    ],
)
def test_invalid_scripts_name_path_turn_and_problem(
    tmp_path: Path, mutate: Any, turn: int | None, reason: str
) -> None:
    data = json.loads(json.dumps(SCRIPT))
    mutate(data)
    path = tmp_path / "script.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ScriptError) as caught:
        load_script(path)
    assert caught.value.turn == turn
    assert reason in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_script_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{turns: [")
    with pytest.raises(ScriptError, match="not valid JSON"):
        load_script(path)


@pytest.mark.parametrize(
    ("tools", "problem"),
    [
        (
            [
                {
                    "type": "computer_use_preview",
                    "environment": "ubuntu",
                    "display_width": 64,
                    "display_height": 40,
                }
            ],
            "declares a 64x40 display, but the model sees 64x36",
        ),
        (
            [
                {
                    "type": "computer_use_preview",
                    "environment": "amiga",
                    "display_width": 64,
                    "display_height": 36,
                }
            ],
            "environment is 'amiga'",
        ),
        (
            [
                {
                    "type": "computer_use_preview",
                    "environment": "linux",
                    "display_width": "64",
                    "display_height": 36,
                }
            ],
            "not two pixel counts",
        ),
        ([{"type": "computer"}, {"type": "computer"}], "declares 2 computer tools"),
    ],
    ids=["wrong-display-size", "unknown-environment", "size-not-int", "two-tools"],
)
def test_the_computer_tool_declared_is_checked(
    client: Callable[[ScriptedModel], openai.OpenAI], tools: list[Any], problem: str
) -> None:
    model = ScriptedModel(parse_script(SCRIPT), raise_on_exit=False)
    with model:
        with pytest.raises(openai.BadRequestError, match=problem):
            client(model).responses.create(model="m", input="go", tools=tools)
        preview: Any = {
            "type": "computer_use_preview",
            "environment": "linux",
            "display_width": 64,
            "display_height": 36,
        }
        client(model).responses.create(model="m", input="go", tools=[preview])  # on script
    assert model.turns_served == 1 and len(model.failures) == 1


ASK: dict[str, Any] = {
    "name": "ask",
    "turns": [
        {"function_call": {"name": "request_user_response", "arguments": {"question": "Color?"}}},
        {"computer_call": {"actions": [{"type": "type", "text": "[{TOOL_OUTPUT}]"}]}},
        {"message": "The user answered: {TOOL_OUTPUT}"},
    ],
}
FUNCTION: Any = {
    "type": "function",
    "name": "request_user_response",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
    "strict": False,
}


def test_a_function_call_turn_and_the_tool_output_in_later_turns(
    client: Callable[[ScriptedModel], openai.OpenAI],
) -> None:
    """A ``function_call`` turn; the next request must answer it; ``{TOOL_OUTPUT}`` in the
    following turns is the latest output their request carries, verbatim (text or parts)."""
    tools: Any = [{"type": "computer"}, FUNCTION]
    answer: Any = {"type": "function_call_output", "call_id": "call_ask_0001", "output": 'Blue "0"'}
    with ScriptedModel(parse_script(ASK), raise_on_exit=False) as model:
        first = client(model).responses.create(model="m", input="go", tools=tools)
        call = first.output[0]
        assert call.type == "function_call"
        assert (call.name, call.call_id) == ("request_user_response", "call_ask_0001")
        assert json.loads(call.arguments) == {"question": "Color?"}
        with pytest.raises(openai.BadRequestError, match="expected the function_call_output"):
            client(model).responses.create(model="m", input="go", tools=tools)
        second = client(model).responses.create(
            model="m", input=[{"role": "user", "content": "go"}, answer], tools=tools
        )
        typed = second.output[0]
        assert typed.type == "computer_call" and typed.actions is not None
        assert typed.actions[0].to_dict() == {"type": "type", "text": '[Blue "0"]'}
        parts: Any = {
            **answer,
            "output": [{"type": "input_text", "text": "Gr"}, {"type": "input_text", "text": "een"}],
        }
        third = client(model).responses.create(
            model="m",
            input=[
                answer,
                parts,
                {
                    "type": "computer_call_output",
                    "call_id": "call_ask_0002",
                    "output": {"type": "computer_screenshot", "image_url": png_url(8, 8)},
                },
            ],
            tools=tools,
        )
        assert third.output_text == "The user answered: Green"
    assert len(model.failures) == 1  # the request without the function's output


RESUMED: dict[str, Any] = {
    "name": "demo",
    "model_view": {"width": 64, "height": 36},
    "turns": [
        {"computer_call": {"actions": [{"type": "screenshot"}]}},
        {
            "computer_call": {
                "actions": [
                    {"type": "click", "button": "left", "x": 1, "y": 2},
                    {"type": "type", "text": "once"},
                ]
            }
        },
        {"message": "Done."},
    ],
}


def _observation(image: bool) -> list[Any]:
    content: list[dict[str, Any]] = [{"type": "input_text", "text": "resumed"}]
    if image:
        content.append({"type": "input_image", "image_url": png_url(64, 36), "detail": "original"})
    return [{"role": "user", "content": "go"}, {"role": "user", "content": content}]


def test_a_resumed_model_starts_at_its_turn_without_the_actions_already_performed(
    client: Callable[[ScriptedModel], openai.OpenAI],
) -> None:
    with ScriptedModel(parse_script(RESUMED), start=1, skip_actions=1) as model:
        answer = client(model).responses.create(
            model="m", input=_observation(True), tools=[{"type": "computer"}]
        )
        assert model.turns_served == 2
    call = answer.output[0]
    assert call.type == "computer_call" and call.call_id == "call_demo_0002"
    assert [a.type for a in call.actions or []] == ["type"], "the click happened before"


def test_a_resumed_request_without_a_fresh_screenshot_is_refused(
    client: Callable[[ScriptedModel], openai.OpenAI],
) -> None:
    model = ScriptedModel(parse_script(RESUMED), start=1, raise_on_exit=False)
    with model, pytest.raises(openai.BadRequestError, match="carries no data:image/png"):
        client(model).responses.create(
            model="m", input=_observation(False), tools=[{"type": "computer"}]
        )
    with pytest.raises(ValueError, match="outside the script's 3 turns"):
        ScriptedModel(parse_script(RESUMED), start=4)
