"""Separate hosts on this machine, and real schedulers and launchers across them.

A host is a network namespace with its own address, hostname and /etc/hosts
(``scripts/hosts.sh``, which a user runs too); the hosts reach each other and nothing
else. Everything a test starts on them ends with the session: ``hosts.sh down`` stops every
process left on a host and removes the hosts.

Fixtures (``tests/cluster/fixtures.py``, one of each per test session):

- ``hosts``: :class:`~tests.cluster.hosts.Hosts` ``node1``..``node4`` on ``10.231.0.0/24``
  (``node1`` is ``10.231.0.1``). Schedulers use node1 and node2; Ray's test cluster
  (``tests/ray_cluster.py``) has its head on node1 and kills whole hosts node3 and node4.
  ``hosts.run(host, argv, timeout=..., env=..., as_name=...)`` runs a command as a host (its
  network, hostname, /etc/hosts) and fails with its output; ``hosts.popen(...)`` starts one;
  ``hosts.command(host, argv)`` is the argv that does it; ``hosts.address(host)``;
  ``hosts.alias(host, *names)`` gives a host more names; ``hosts.kill(host)`` kills every
  process on it (the machine dies); ``hosts.inside(host)`` puts the calling thread on a
  host's network (a driver that must itself be on a host, such as Ray's);
  ``hosts.rsh`` is a remote-shell agent for launchers that would use ssh.
- ``slurm``: :class:`~tests.cluster.slurm.Slurm`, SLURM 22.05 with ``slurmctld`` on
  ``node1`` and a ``slurmd`` on ``node1`` and ``node2`` (2 CPUs each), a private munge.
  ``slurm.sbatch(script_or_text, *args) -> job_id``, ``slurm.wait(job_id, states,
  timeout)``, ``slurm.state(job_id)``, ``slurm.job(job_id)`` (``scontrol show job``'s
  fields), ``slurm.scancel(job_id, signal=None, batch=False)``, ``slurm.requeue(job_id)``,
  ``slurm.srun(args, timeout)`` (never waits for busy nodes), ``slurm.command(argv)`` for
  any client command, ``slurm.logs()`` for a failure's message. A job runs with the
  submitter's environment (this interpreter, this checkout). Ids restart at 1 each session.

Helpers (plain functions): ``launchers.openmpi``/``launchers.mpich`` (an ``mpirun`` across
nodes, run as the first), ``launchers.torchrun`` (one agent's line, static or c10d),
``sagemaker.instances``/``sagemaker.tree`` (``algo-N`` instances, each with its own
``SAGEMAKER_BASE_DIR`` tree for the toolkit's ``train``), ``kubeflow.pytorchjob``/
``kubeflow.trainjob`` (the pods of a job with the variables their controllers set: no
Kubernetes can run here, so a pod is a host named as the pod).
"""
