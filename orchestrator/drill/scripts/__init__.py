"""Scripted-model scripts of the drill (JSON data; see :mod:`orchestrator.drill.task`)."""
