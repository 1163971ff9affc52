"""``cubicle serve``: the Agents sessions API (``client.beta.agents.sessions``), self-hosted.

Point ``OpenAI(base_url="http://127.0.0.1:8377/v1", api_key=TOKEN)`` at it and
``client.beta.agents.sessions`` create / retrieve / list / delete / ``stream(...)``,
``.events`` (create, stream) and ``.items`` (list) run against cubicle desktops.

Modules, one job each: :mod:`~cubicle.orchestrator.serve.app` (routes),
:mod:`~cubicle.orchestrator.serve.auth` (the token), :mod:`~cubicle.orchestrator.serve.errors` (the
error shape),
:mod:`~cubicle.orchestrator.serve.environment` (request environment → sandbox),
:mod:`~cubicle.orchestrator.serve.agents` (which loop: drill, task, Responses model),
:mod:`~cubicle.orchestrator.serve.store` (sessions, items, event fan-out, pages),
:mod:`~cubicle.orchestrator.serve.worker` (provisioning, turns, approvals),
:mod:`~cubicle.orchestrator.serve.turns` (the loops), :mod:`~cubicle.orchestrator.serve.reporter`
(trajectory → items and events), :mod:`~cubicle.orchestrator.serve.wire` (payload shapes),
:mod:`~cubicle.orchestrator.serve.registry` (restart collection),
:mod:`~cubicle.orchestrator.serve.cli`.
"""
