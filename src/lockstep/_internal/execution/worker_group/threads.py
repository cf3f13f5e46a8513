"""The threads of a machine's workers: OpenMP's settings in each worker's environment."""

from __future__ import annotations

from lockstep._internal.execution.capacity import usable_cpus


def set_threads(env: dict[str, str], threads: int, workers_here: int) -> None:
    """Give a worker's ``env`` OpenMP's thread count ``threads`` unless the user set one
    (as Ray does); and where the ``workers_here`` of this machine have more threads
    together than it has CPUs, let OpenMP's idle threads sleep (``OMP_WAIT_POLICY=PASSIVE``)
    unless the user chose a policy: a thread that spins while it waits for its team holds
    a CPU another worker's team needs (xgboost, 4 workers x 2 threads on 2 CPUs: a boosting
    round 0.24-0.26 s spinning, 0.02-0.03 s sleeping). OpenMP reads the policy when it
    loads: a worker forked from a driver that had loaded it keeps the driver's. Ray leaves
    OpenMP spinning.

    Example:
        >>> env = {}
        >>> set_threads(env, 1, workers_here=1)
        >>> env
        {'OMP_NUM_THREADS': '1'}
        >>> set_threads(env, 1, workers_here=usable_cpus() + 1)
        >>> env["OMP_WAIT_POLICY"]
        'PASSIVE'
    """
    env.setdefault("OMP_NUM_THREADS", str(threads))
    try:
        per_worker = max(1, int(env["OMP_NUM_THREADS"]))
    except ValueError:
        per_worker = threads  # a list, one count per nesting level: the outer one is ours
    if workers_here * per_worker > usable_cpus():
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
