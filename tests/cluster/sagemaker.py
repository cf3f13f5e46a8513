"""SageMaker training instances on the hosts: a ``/opt/ml``-like tree per instance, as
SageMaker lays it out in each training container, for the real training toolkit
(``sagemaker-training``, whose ``train`` command runs the entry point as the container's
entry point does).

Instances are named ``algo-1``, ``algo-2``, ... as SageMaker names them; every name must
resolve on every instance (the toolkit waits until they do), so they are added to the hosts
as aliases (:func:`instances`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.cluster.hosts import Hosts


def instances(hosts: Hosts, nodes: Sequence[str]) -> list[str]:
    """Name ``nodes`` ``algo-1``, ``algo-2``, ... in every host's /etc/hosts; return the names."""
    names = [f"algo-{i + 1}" for i in range(len(nodes))]
    for node, name in zip(nodes, names, strict=True):
        hosts.alias(node, name)
    return names


def tree(
    base: Path,
    *,
    current_host: str,
    hosts: Sequence[str],
    entry_point: str,
    source_dir: Path,
    hyperparameters: Mapping[str, object] = {},
    channels: Mapping[str, Path] = {},
) -> dict[str, str]:
    """Lay out one instance's tree under ``base`` (``input/config``, ``input/data/CHANNEL``,
    ``model``, ``output``, ``code``); return the environment its ``train`` command needs."""
    config = base / "input" / "config"
    config.mkdir(parents=True)
    for sub in ("model", "output", "code", "checkpoints"):
        (base / sub).mkdir()
    resource = {
        "current_host": current_host,
        "current_instance_type": "ml.c5.xlarge",
        "current_group_name": "homogeneousCluster",
        "hosts": list(hosts),
        "network_interface_name": "host0",
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": "ml.c5.xlarge",
                "hosts": list(hosts),
            }
        ],
    }
    # Hyperparameter values are JSON strings; sagemaker_* ones configure the toolkit.
    toolkit = {
        "sagemaker_program": entry_point,
        "sagemaker_submit_directory": str(source_dir),
        "sagemaker_region": "us-west-2",  # no lookup of a region
        "sagemaker_container_log_level": 20,
    }
    hyper = {k: json.dumps(v) for k, v in {**toolkit, **hyperparameters}.items()}
    data = {}
    (base / "input" / "data").mkdir()
    for name, path in channels.items():  # each instance downloads its own copy
        shutil.copytree(path, base / "input" / "data" / name)
        data[name] = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"}
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    (config / "hyperparameters.json").write_text(json.dumps(hyper))
    (config / "inputdataconfig.json").write_text(json.dumps(data))
    return {"SAGEMAKER_BASE_DIR": str(base), "AWS_EC2_METADATA_DISABLED": "true"}
