"""A local, scripted stand-in for the Responses API (offline, keyless drills and tests).

See :mod:`cubicle.drivers.scripted_model.server` for :class:`ScriptedModel` and
:mod:`cubicle.drivers.scripted_model.script` for the script format.
"""

from __future__ import annotations

from cubicle.drivers.scripted_model.script import Script, Turn, load_script, parse_script
from cubicle.drivers.scripted_model.server import OnTurn, ScriptedModel

__all__ = ["OnTurn", "Script", "ScriptedModel", "Turn", "load_script", "parse_script"]
