"""The live view of a sandbox in a browser tab, and the hand-over of control to a person.

- :mod:`.control` — ``cubicle view``: start or reuse the sandbox's view server, one-time links,
  take over / give back control.
- :mod:`.server` — the view server (noVNC on 127.0.0.1, one per sandbox, a labelled background
  process).
- :mod:`.stream` — a VNC session of the guest's desktop over the engine's exec stream.
- :mod:`cubicle.orchestrator.view_servers` — the state file and process label, below the
  providers: :meth:`~cubicle.orchestrator.provider.Provider.destroy` stops a sandbox's servers
  first, on every backend (hence ``down`` and ``gc``).
- :mod:`.handover` — the agent loop's gate: ``before_action`` waits while a person has control.
"""

from cubicle.orchestrator.view_servers import stop_view_servers

__all__ = ["stop_view_servers"]
