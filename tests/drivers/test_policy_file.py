"""Policy files: valid ones load and decide; invalid ones fail naming the line and reason."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
from anthropic.lib.tools._toolsets._computer_inputs import BetaComputerMemberName

from cubicle.drivers.decisions import ActionFacts, SafetyCheck
from cubicle.drivers.errors import PolicyFileError
from cubicle.drivers.policy_file import load_policy, parse_policy
from cubicle.drivers.policy_schema import CLAUDE_MEMBERS

VALID = """\
version = 1
default = "deny"
safety_checks = "ask"

[[rule]]
decision = "deny"
actions = ["type"]
text = "(?i)password"
note = "no passwords"

[[rule]]
decision = "deny"
keys = ["ctrl+alt+Delete", ["super", "l"]]

[[rule]]
decision = "allow"
actions = ["click", "double_click", "move", "drag", "scroll"]
region = {x = 0, y = 0, width = 1280, height = 720}

[[rule]]
decision = "allow"
actions = ["type", "keypress", "screenshot", "wait"]

[[check]]
decision = "allow"
codes = ["malicious_instructions"]
"""


def test_valid_file_loads_and_first_match_wins(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(VALID)
    policy = load_policy(path)
    assert len(policy.rules) == 4
    assert policy.rules[0].line == 5
    verdict, who = policy.decide_action(ActionFacts("type", text="my Password is"))
    assert (verdict, who) == ("deny", f"policy {path} rule 1 (line 5): no passwords")
    assert policy.decide_action(ActionFacts("type", text="hello"))[0] == "allow"


def test_chords_match_case_insensitively_with_aliases() -> None:
    policy = parse_policy(VALID)
    assert (
        policy.decide_action(ActionFacts("keypress", keys=("CTRL", "ALT", "DELETE")))[0] == "deny"
    )
    assert policy.decide_action(ActionFacts("keypress", keys=("Super_L", "L")))[0] == "deny"
    assert policy.decide_action(ActionFacts("keypress", keys=("ctrl", "l")))[0] == "allow"


def test_regions_are_screen_pixels_and_need_every_point_inside() -> None:
    policy = parse_policy(VALID)
    inside = ActionFacts("drag", ((1, 1), (2, 2)), ((10, 10), (1279, 719)))
    crossing = ActionFacts("drag", ((1, 1), (2, 2)), ((10, 10), (1280, 10)))
    unmappable = ActionFacts("click", ((5000, 1),), None)
    assert policy.decide_action(inside)[0] == "allow"
    assert policy.decide_action(crossing) == ("deny", "policy <policy> default")
    assert policy.decide_action(unmappable)[0] == "deny"


def test_safety_check_rules_and_default() -> None:
    policy = parse_policy(VALID)
    known = (SafetyCheck("sc_1", "malicious_instructions", "m"),)
    other = (SafetyCheck("sc_2", "sensitive_domain", "m"),)
    assert policy.decide_checks(known)[0] == "allow"
    assert policy.decide_checks(other) == ("ask", "policy <policy> safety_checks default")


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('default = "maybe"\n', 1, "default must be one of 'allow', 'deny' or 'ask', got 'maybe'"),
        (
            'default = "deny"\n[[rule]]\ndecision = "allow"\nactoins = ["click"]\n',
            4,
            "rule 1: unknown key 'actoins'",
        ),
        (
            '[[rule]]\ndecision = "allow"\n\n[[rule]]\nactions = ["click"]\n',
            4,
            "rule 2: missing 'decision'",
        ),
        ('[[rule]]\ndecision = "allow"\nactions = ["clik"]\n', 3, "unknown action type 'clik'"),
        (
            '[[rule]]\ndecision = "deny"\n\ntext = "(unclosed"\n',
            4,
            "text is not a valid regular expression",
        ),
        ('[[rule]]\ndecision = "deny"\nkeys = ["ctrl+hyper9"]\n', 3, "unknown key 'hyper9'"),
        (
            '[[rule]]\ndecision = "deny"\nregion = {x = 0, y = 0, width = 0, height = 5}\n',
            3,
            "rule 1: region.width should be greater than or equal to 1",
        ),
        (
            '[[check]]\ndecision = "allow"\ncodes = "malicious_instructions"\n',
            3,
            "check 1: codes must be a non-empty list of strings",
        ),
        ('default = "deny"\nverbose = true\n', 2, "unknown top-level key 'verbose'"),
        ('default = "deny"\n[[rule]\ndecision = "allow"\n', 2, "not valid TOML"),
        ("version = 2\n", 1, "version must be 1"),
    ],
    ids=[
        "bad-default",
        "misspelt-key",
        "missing-decision",
        "unknown-action",
        "bad-regex",
        "unknown-key-name",
        "empty-region",
        "codes-not-list",
        "unknown-top-key",
        "toml-syntax",
        "version",
    ],
)
def test_invalid_files_name_the_line_and_reason(
    tmp_path: Path, text: str, line: int, reason: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PolicyFileError) as caught:
        load_policy(path)
    assert caught.value.line == line
    assert reason in str(caught.value)
    assert f"{path}:{line}" in str(caught.value)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="cannot read it") as caught:
        load_policy(tmp_path / "absent.toml")
    assert caught.value.line is None


HEAD = 'default = "deny"\n\n[[rule]]\ndecision = "allow"\n\n[[rule]]\ndecision = "deny"\n'
"""Two rules; the second's header is line 6, its keys from line 7 on."""


@pytest.mark.parametrize(
    ("tail", "line", "message"),
    [
        # wrong type: the key's line, its entry (counted from 1) and its path
        ("note = 3\n", 8, "rule 2: note should be a valid string"),
        ('region = {x = "0", y = 0, width = 1, height = 1}\n', 8, "rule 2: region.x should be"),
        ("region = {x = true, y = 0, width = 1, height = 1}\n", 8, "rule 2: region.x should be"),
        ("region = 5\n", 8, "rule 2: region must be a table"),
        ('actions = "click"\n', 8, "rule 2: actions should be a valid list"),
        ("text = 3\n", 8, "rule 2: text must be a regular expression string"),
        # unknown key, at the top level of an entry and in a nested table
        ("actoins = []\n", 8, "rule 2: unknown key 'actoins'; allowed: actions, decision, keys"),
        (
            "region = {x = 0, y = 0, width = 1, height = 1, z = 1}\n",
            8,
            "rule 2: region: unknown key 'z'; allowed: height, width, x, y",
        ),
        # missing key: nested (its table's line)
        ("region = {x = 0, y = 0, width = 1}\n", 8, "rule 2: region: missing 'height'"),
        # a nested list element, named by its index
        ('actions = ["click", 3]\n', 8, "rule 2: actions[1] should be a valid string"),
        ('actions = ["click", "clik"]\n', 8, "rule 2: actions[1]: unknown action type 'clik'"),
        ("actions = []\n", 8, "rule 2: actions must not be empty"),
        ('keys = ["ctrl+l", 3]\n', 8, "rule 2: keys: bad chord 3"),
    ],
)
def test_a_wrong_key_is_named_by_its_path_and_line(tail: str, line: int, message: str) -> None:
    with pytest.raises(PolicyFileError) as caught:
        parse_policy(HEAD + tail, "p.toml")
    assert caught.value.line == line, caught.value
    assert f"policy file p.toml:{line}: {message}" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        # bad enum values (the choices and what was given)
        ('\n\nsafety_checks = "sometimes"\n', 3, "safety_checks must be one of 'allow', 'deny'"),
        (HEAD.removesuffix('"deny"\n') + '"DENY"\n', 7, "rule 2: decision must be one of 'allow'"),
        ("version = true\n", 1, "version must be 1, got True"),
        ('version = "1"\n', 1, "version must be 1, got '1'"),
        # missing key in an entry: the entry's header line
        (HEAD + '\n[[check]]\ncodes = ["x"]\n', 9, "check 1: missing 'decision'"),
        # a table where an array of tables belongs, and a non-table entry
        ('default = "deny"\nrule = {decision = "allow"}\n', 2, "rule must be an array of tables"),
        ("rule = [1]\n", 1, "rule 1 must be a table"),
        # a nested list element of a check
        ('[[check]]\ndecision = "allow"\ncodes = ["a", 1]\n', 3, "check 1: codes must be a non"),
    ],
)
def test_bad_values_name_the_field_and_line(text: str, line: int, message: str) -> None:
    with pytest.raises(PolicyFileError) as caught:
        parse_policy(text, "p.toml")
    assert caught.value.line == line, caught.value
    assert f"policy file p.toml:{line}: {message}" in str(caught.value)


def test_claudes_members_are_anthropics() -> None:
    """The policy schema spells Claude's members (no anthropic import at every ``cubicle``
    start); they are the anthropic package's own."""
    assert get_args(BetaComputerMemberName) == CLAUDE_MEMBERS
