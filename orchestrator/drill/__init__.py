"""The offline keyless drill (``cubicle drill``) and the shared pieces of ``cubicle run``.

* :mod:`orchestrator.drill.runner` — :func:`run_drill`: one task (:mod:`orchestrator.tasks`)
  with its scripted model, pixels only, on anything that gives agent connections;
* :mod:`orchestrator.drill.guest_steps` — a task's set-up before the first turn, and clean-up;
* :mod:`orchestrator.drill.session` — the real openai loop in a worker thread with every turn,
  action, approval and diagnostic recorded (:mod:`orchestrator.trajectory`);
* :mod:`orchestrator.drill.stale` — stale model-visible screenshots;
* :mod:`orchestrator.drill.verify` — a task's checks through the agent;
  :mod:`orchestrator.drill.verifiers` — the shipped tasks' Python verifiers;
* :mod:`orchestrator.drill.cli` — the ``drill`` (``--task``, ``--all`` and its table) and ``run``
  subcommands.
"""
