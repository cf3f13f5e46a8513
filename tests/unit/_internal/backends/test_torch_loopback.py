"""Which interface gloo and NCCL are told to use, by node address."""

from __future__ import annotations

import socket

from lockstep._internal.backends.torch import loopback_env


def test_a_loopback_node_keeps_gloo_and_nccl_on_the_loopback_interface():
    loopback = next(name for _, name in socket.if_nameindex() if name in ("lo", "lo0"))
    expected = {"GLOO_SOCKET_IFNAME": loopback, "NCCL_SOCKET_IFNAME": loopback}
    assert loopback_env("127.0.0.1") == expected
    assert loopback_env("::1") == expected


def test_a_node_on_the_network_leaves_the_choice_to_the_frameworks():
    assert loopback_env("10.0.0.5") == {}
    assert loopback_env("node-7.cluster") == {}
