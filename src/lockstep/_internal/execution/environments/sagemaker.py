"""SageMaker training jobs: one container per instance, each running the entry point once.

The instances are listed in ``input/config/resourceconfig.json`` under
``SAGEMAKER_BASE_DIR`` (``/opt/ml`` in a real job): ``hosts`` in the job's order
(``algo-1``, ``algo-2``, ..., ``algo-10``: by the list, never sorted as text) and
``current_host``; the training toolkit also sets ``SM_HOSTS`` and ``SM_CURRENT_HOST``.

A job's directories, all under the base: ``input/data/<channel>`` (``SM_CHANNEL_<NAME>``),
``model`` (``SM_MODEL_DIR``, uploaded as the model when the job ends), ``output/failure``
(the job's failure reason) and ``checkpoints`` (kept in S3 when the estimator names a
``checkpoint_s3_uri``: a later job with the same location starts with its files).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from lockstep._internal.execution.environments.base import (
    Launch,
    LaunchError,
    optional_integer,
    read,
)

LAUNCHER = "SageMaker"
DEFAULT_BASE = "/opt/ml"
VARIABLES = ("SAGEMAKER_BASE_DIR", "SM_HOSTS", "SM_CURRENT_HOST", "TRAINING_JOB_NAME")
FAILURE_LIMIT = 1024  # characters of a failure SageMaker shows as the job's reason


def base_dir(env: Mapping[str, str]) -> str:
    """The root of the job's directories."""
    return env.get("SAGEMAKER_BASE_DIR") or DEFAULT_BASE


def detect(env: Mapping[str, str]) -> Launch | None:
    """This process as a SageMaker instance's entry point, or None outside SageMaker.

    Example:
        >>> launch = detect({"SM_HOSTS": '["algo-1", "algo-2", "algo-10"]',
        ...                  "SM_CURRENT_HOST": "algo-10", "SAGEMAKER_BASE_DIR": "/nowhere"})
        >>> launch.process_rank, launch.hosts
        (2, ('algo-1', 'algo-2', 'algo-10'))
    """
    config = _resource_config(env)
    if config is None:
        return None
    hosts, current = config
    if current not in hosts:
        raise LaunchError(
            f"SageMaker's current host {current!r} is not among its hosts {hosts}. HINT: "
            "check input/config/resourceconfig.json, or set LOCKSTEP_CLUSTER=off"
        )
    rank = hosts.index(current)
    job = env.get("TRAINING_JOB_NAME") or "-".join(hosts)
    return Launch(
        name="sagemaker",
        launcher=LAUNCHER,
        process_rank=rank,
        num_processes=len(hosts),
        local_process_rank=0,
        processes_per_node=1,
        num_nodes=len(hosts),
        node_rank=rank,
        hosts=tuple(hosts),
        # a later job with the same checkpoint location continues the same run
        job_id="sagemaker",
        launch_id=f"sagemaker-{job}",
        cpus_per_node=optional_integer(env, "SM_NUM_CPUS"),
        gpus_per_node=optional_integer(env, "SM_NUM_GPUS"),
        variables=read(env, *VARIABLES),
    )


def _resource_config(env: Mapping[str, str]) -> tuple[list[str], str] | None:
    """``(hosts, current_host)`` from resourceconfig.json, else from ``SM_HOSTS``."""
    path = os.path.join(base_dir(env), "input", "config", "resourceconfig.json")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        return [str(h) for h in config["hosts"]], str(config["current_host"])
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LaunchError(f"SageMaker's {path} cannot be read: {exc}") from exc
    if "SM_HOSTS" in env and "SM_CURRENT_HOST" in env:
        try:
            return [str(h) for h in json.loads(env["SM_HOSTS"])], env["SM_CURRENT_HOST"]
        except ValueError as exc:
            raise LaunchError(f"SM_HOSTS={env['SM_HOSTS']!r} is not a JSON list") from exc
    return None


def model_dir(env: Mapping[str, str]) -> str:
    """Where the job's model goes (``SM_MODEL_DIR``), uploaded when the job ends."""
    return env.get("SM_MODEL_DIR") or os.path.join(base_dir(env), "model")


def checkpoint_dir(env: Mapping[str, str]) -> str:
    """The job's local checkpoint directory, kept in S3 with a ``checkpoint_s3_uri``: a
    run's default storage_path here, so that a later job with it continues the run."""
    return os.path.join(base_dir(env), "checkpoints")


def write_failure(message: str, env: Mapping[str, str]) -> None:
    """The failure's first 1,024 characters in ``output/failure``: the job's failure
    reason in SageMaker's console and API."""
    path = os.path.join(base_dir(env), "output", "failure")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(message[:FAILURE_LIMIT])
