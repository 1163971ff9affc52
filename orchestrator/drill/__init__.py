"""The offline keyless drill (``cubicle drill``) and the shared pieces of ``cubicle run``.

* :mod:`orchestrator.drill.runner` — :func:`run_drill` on anything that gives agent
  connections (a sandbox, or a local test desktop);
* :mod:`orchestrator.drill.task` — what the drill asks for and must find (expected texts) and
  the scripted model's script (``scripts/desktop_drill.json``);
* :mod:`orchestrator.drill.guest_steps` — set-up, scripted waits and clean-up in the guest;
* :mod:`orchestrator.drill.session` — the real openai loop in a worker thread with every turn,
  action, approval and diagnostic recorded (:mod:`orchestrator.trajectory`);
* :mod:`orchestrator.drill.verify` — checks of the guest's files through the agent;
* :mod:`orchestrator.drill.cli` — the ``drill`` and ``run`` subcommands.
"""
