"""A process of a multi-node job: joins torch.distributed (gloo, from the variables its
launcher set), sums rank + 1 over the world, and prints what it saw as one JSON line."""

import json
import os
import socket
import sys

KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR")


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    env = {k: v for k, v in os.environ.items() if k.startswith(("PET_", "SM_", "TORCHELASTIC"))}
    env.update({k: os.environ[k] for k in KEYS if k in os.environ})
    seen = {
        "host": socket.gethostname(),
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "sum": total.item(),
        "env": env,
    }
    # One write of the whole line: the processes of a node share its stdout, and a line
    # written in two parts (print's text, then its newline) may take another's in between.
    os.write(sys.stdout.fileno(), (json.dumps(seen) + "\n").encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
