"""Warm pools: ready, never-used sandboxes waiting to be claimed in milliseconds.

``cubicle pool fill N`` starts N sandboxes of one *shape* (backend, image, screen, network, CPU
and memory limits) and parks them as pool **members**. While a pool of the requested shape
exists, :meth:`cubicle.orchestrator.sandbox.Sandbox.create` (and ``cubicle up``) **claims** a member
instead of starting one (``Sandbox.create(pool=False)`` opts out); with no pool nothing changes.

How it stays safe (:mod:`cubicle.orchestrator.ownership` is the one rule):

- A member is a *detached* sandbox whose ready mark is its pool name
  (:func:`cubicle.orchestrator.pool_marks.member_name`); it expires with its pool, and ``gc`` takes
  it then like any expired sandbox.
- A claim is one atomic act that names the claimer. Docker: creating the member's *claim
  marker* (a never-started container ``cubicle-<id>-claim`` labelled with the claimer's stamp);
  a second claimer's create conflicts. VM: hard-linking ``claim.json`` (the claimer's stamp)
  into the member's run folder (:mod:`cubicle.orchestrator.providers.vm.run_marks`); a second link
  fails. So two claims never get the same member. From then on the
  marker's stamp is the sandbox's stamp (owner, lifetime, expiry of the claim), so ``gc`` treats
  a claimed sandbox exactly as one the claimer created.
- Members are never used before their claim (the filler only waits for the agent's hello and
  takes one warm-up screenshot, which writes nothing): a claimed sandbox's home folder is as
  fresh as a new one's.
- After a claim a labelled background process (``python -m cubicle.orchestrator.pool.refill --pool
  KEY``) tops the pool up; ``pool drain`` and ``gc`` end it by pid.

Each backend's members are its own (:meth:`cubicle.orchestrator.provider.Provider.pool_members`,
a :class:`~cubicle.orchestrator.provider.PoolMembers`: the member provider, listing, the atomic
claim, what a drain needs; Docker's in :mod:`cubicle.orchestrator.providers.docker.pool_members`,
the VM's in :mod:`cubicle.orchestrator.providers.vm.pool_members`); the names and the choice of
the member a claim tries are :mod:`cubicle.orchestrator.pool_marks`. This package imports no
backend: only that interface, and the providers' registry
(:func:`cubicle.orchestrator.providers.get_provider`) for a pool's backend by name.

Modules: :mod:`.registry` (pool records on the host), :mod:`.fill` (making members),
:mod:`.refill` (the background process), :mod:`.admin` (``pool fill|ls|drain`` and ``gc``),
:mod:`.claim` (the claimer :mod:`cubicle.orchestrator.claims` loads by name for
``Sandbox.create``: ``cubicle.orchestrator.sandbox`` imports nothing of this package),
:mod:`.cli`. This package's ``__init__`` imports nothing.
"""
