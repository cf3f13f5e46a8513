"""NCCL cannot put two ranks on one GPU: the ranks that share one are named before NCCL
fails on them (the whole path, on a GPU, is in tests/integration/test_gpu.py)."""

import pytest

from lockstep._core.errors import UsageError
from lockstep._internal.backends.torch import check_one_rank_per_gpu


def test_ranks_on_gpus_of_their_own_pass():
    check_one_rank_per_gpu(["GPU-0", "GPU-1", "GPU-2"])
    check_one_rank_per_gpu(["GPU-0"])


def test_ranks_sharing_a_gpu_are_named_with_the_fix():
    with pytest.raises(UsageError) as raised:
        check_one_rank_per_gpu(["GPU-0", "GPU-1", "GPU-0", "GPU-1", "GPU-0"])
    message = str(raised.value)
    assert message.startswith(
        "ranks 0, 2 and 4 were given the same GPU (GPU-0), and NCCL cannot run two ranks of "
        "one process group on one GPU. HINT: "
    )
    assert "resources_per_worker={'GPU': 1}" in message
    assert "TorchConfig(backend='gloo')" in message
