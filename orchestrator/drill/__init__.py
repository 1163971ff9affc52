"""The offline keyless drill (``cubicle drill``): a task's scripted model through the real SDK
loop, pixels only. What it shares with ``cubicle run`` (the loop thread and its recording, guest
set-up, checks, cancellation) is in :mod:`orchestrator.modelrun`; nothing here imports
:mod:`orchestrator.run_task`, nor it anything here.

* :mod:`orchestrator.drill.runner` — :func:`run_drill`: one task (:mod:`orchestrator.tasks`)
  with its scripted model, pixels only, on anything that gives agent connections;
* :mod:`orchestrator.drill.stale` — stale model-visible screenshots;
* :mod:`orchestrator.drill.cli` — the ``drill`` subcommand (``--task``, ``--all`` and its table).
"""
