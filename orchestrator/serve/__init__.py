"""``cubicle serve``: the Agents sessions API (``client.beta.agents.sessions``), self-hosted.

Point ``OpenAI(base_url="http://127.0.0.1:8377/v1", api_key=TOKEN)`` at it and
``client.beta.agents.sessions`` create / retrieve / list / delete / ``stream(...)``,
``.events`` (create, stream) and ``.items`` (list) run against cubicle desktops.

Modules, one job each: :mod:`~orchestrator.serve.app` (routes), :mod:`~orchestrator.serve.auth`
(the token), :mod:`~orchestrator.serve.errors` (the error shape),
:mod:`~orchestrator.serve.environment` (request environment → sandbox),
:mod:`~orchestrator.serve.agents` (which loop: drill, task, Responses model),
:mod:`~orchestrator.serve.store` (sessions, items, event fan-out, pages),
:mod:`~orchestrator.serve.worker` (provisioning, turns, approvals),
:mod:`~orchestrator.serve.turns` (the loops), :mod:`~orchestrator.serve.reporter`
(trajectory → items and events), :mod:`~orchestrator.serve.wire` (payload shapes),
:mod:`~orchestrator.serve.registry` (restart collection), :mod:`~orchestrator.serve.cli`.
"""
