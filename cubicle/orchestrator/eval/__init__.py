"""``cubicle eval SUITE``: a suite of tasks, K attempts each, N at a time, resumable.

Modules, each with one job:

* :mod:`.suite` — what SUITE names: a folder of task files and Harbor task folders
  (:mod:`cubicle.orchestrator.harbor`) or a list file → the tasks;
* :mod:`.oracle` — the models an attempt can run without a key: the task's oracle (its
  ``[scripted]`` script) and ``cubicle-idle`` (only screenshots); the person's callback;
* :mod:`.attempt` — one attempt in a fresh sandbox (a sandbox error retried once) → a record;
* :mod:`.results` — ``results.jsonl`` (one record per attempt, appended as it ends) and the
  run's identity ``eval.json`` that ``--resume`` compares;
* :mod:`.summary` — pass rate, pass@k, the table and ``index.html``;
* :mod:`.progress` — the progress lines (done/running/failed, ETA, tokens);
* :mod:`.live` — the live panel below those lines on a terminal (``rich``);
* :mod:`.cli` — the ``eval`` subcommand and its scheduler.
"""
