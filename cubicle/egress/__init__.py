"""The egress proxy and THE origin grammar, below everything that uses them.

- :mod:`cubicle.egress.origins` — origins, policies and the one decision (standard library only;
  the drivers' policy files, the orchestrator's network policies and the proxy all use it).
- :mod:`cubicle.egress.proxy` — the proxy (standard library and h11): runs outside the guest, on
  Docker in a container of its own, on VMs as a host process.
- :mod:`cubicle.egress.bundle` — the proxy as one file (a zipapp of this package) for the places
  it runs without cubicle installed.

Nothing here imports the rest of cubicle, and importing this package imports nothing.
"""
