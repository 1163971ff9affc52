"""The offline keyless drill (``cubicle drill``): a task's scripted model through the real SDK
loop, pixels only. What it shares with ``cubicle run`` (the loop thread and its recording, guest
set-up, checks, cancellation) is in :mod:`cubicle.orchestrator.modelrun`; nothing here imports
:mod:`cubicle.orchestrator.run_task`, nor it anything here.

* :mod:`cubicle.orchestrator.drill.runner` — :func:`run_drill`: one task
(:mod:`cubicle.orchestrator.tasks`)
  with its scripted model, pixels only, on anything that gives agent connections;
* :mod:`cubicle.orchestrator.drill.stale` — stale model-visible screenshots;
* :mod:`cubicle.orchestrator.drill.cli` — the ``drill`` subcommand (``--task``, ``--all`` and its
table).
"""
