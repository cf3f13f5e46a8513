#!/usr/bin/env bash
# Hosts on this machine for multi-node runs: network namespaces joined by a bridge, each with
# its own address, hostname and /etc/hosts. Nothing leaves them: the machine's own network
# namespace gets no address on their network, so they reach only each other and their own
# loopback. Needs root (ip netns, nsenter, unshare).
#
# Usage:
#   scripts/hosts.sh up N | up NAME...     N hosts node1..nodeN (or the names given)
#   scripts/hosts.sh exec [--as NAME] HOST CMD...
#                                          run CMD as HOST: its network, its hostname (NAME
#                                          with --as), the hosts' /etc/hosts
#   scripts/hosts.sh alias HOST NAME...    more names for HOST in every host's /etc/hosts
#   scripts/hosts.sh addr HOST             HOST's address
#   scripts/hosts.sh kill HOST [SIGNAL]    signal every process on HOST (default KILL)
#   scripts/hosts.sh status                the hosts, their addresses and process counts
#   scripts/hosts.sh down                  stop every process on the hosts, remove them
#
# Settings (environment), so that several sets of hosts can be up at once:
#   LOCKSTEP_HOSTS_PREFIX  namespace names: PREFIX-HOST, and PREFIX-switch (default lsh)
#   LOCKSTEP_HOSTS_SUBNET  the first three numbers of the hosts' /24 (default 10.231.0):
#                          host i gets SUBNET.i
#   LOCKSTEP_HOSTS_DIR     where the hosts file and state live (default
#                          /run/lockstep-hosts/PREFIX); `down` removes it
#
# Also written by `up`: DIR/rsh, a remote-shell agent (`rsh HOST CMD...` runs CMD as HOST) for
# launchers that would use ssh, such as `mpirun --mca plm_rsh_agent DIR/rsh`.
set -euo pipefail

PREFIX="${LOCKSTEP_HOSTS_PREFIX:-lsh}"
SUBNET="${LOCKSTEP_HOSTS_SUBNET:-10.231.0}"
DIR="${LOCKSTEP_HOSTS_DIR:-/run/lockstep-hosts/$PREFIX}"
SWITCH="$PREFIX-switch"
IFACE=host0  # each host's interface: not eth0, so that it is never taken for the machine's

die() { echo "hosts.sh: $*" >&2; exit 1; }

require_up() { [ -f "$DIR/names" ] || die "no hosts are up under $DIR (prefix $PREFIX)"; }

names() { cat "$DIR/names"; }

index_of() {  # the 1-based position of host $1
    require_up
    local i=0 name
    for name in $(names); do
        i=$((i + 1))
        if [ "$name" = "$1" ]; then echo "$i"; return; fi
    done
    die "no host named '$1' (hosts: $(names | tr '\n' ' '))"
}

our_namespaces() { ip netns list | awk '{print $1}' | grep -E "^$PREFIX-" || true; }

up() {
    [ $# -ge 1 ] || die "up needs a number of hosts or their names"
    local hosts=("$@")
    if [ $# -eq 1 ] && [[ "$1" =~ ^[0-9]+$ ]]; then
        hosts=()
        for i in $(seq 1 "$1"); do hosts+=("node$i"); done
    fi
    [ ${#hosts[@]} -le 250 ] || die "at most 250 hosts fit in one /24"
    if [ -n "$(our_namespaces)" ] || [ -e "$DIR" ]; then
        die "hosts with prefix $PREFIX are already up (or were left behind): run" \
            "'LOCKSTEP_HOSTS_PREFIX=$PREFIX $0 down' first, or choose another prefix"
    fi
    mkdir -p "$DIR"
    trap 'down >/dev/null 2>&1' ERR
    printf '%s\n' "${hosts[@]}" > "$DIR/names"
    {
        printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n'
        local i=0
        for name in "${hosts[@]}"; do i=$((i + 1)); printf '%s.%s\t%s\n' "$SUBNET" "$i" "$name"; done
    } > "$DIR/hosts"
    ip netns add "$SWITCH"
    ip -n "$SWITCH" link add br0 type bridge
    ip -n "$SWITCH" link set br0 up
    local i=0
    for name in "${hosts[@]}"; do
        i=$((i + 1))
        ip netns add "$PREFIX-$name"
        ip link add "$IFACE" netns "$PREFIX-$name" type veth peer name "p$i" netns "$SWITCH"
        ip -n "$SWITCH" link set "p$i" master br0 up
        ip -n "$PREFIX-$name" addr add "$SUBNET.$i/24" dev "$IFACE"
        ip -n "$PREFIX-$name" link set lo up
        ip -n "$PREFIX-$name" link set "$IFACE" up
    done
    cat > "$DIR/rsh" <<EOF
#!/bin/sh
# rsh HOST CMD...: run CMD (one shell command line) as HOST, for launchers that would use ssh.
host="\$1"; shift
LOCKSTEP_HOSTS_PREFIX='$PREFIX' LOCKSTEP_HOSTS_DIR='$DIR' exec '$(realpath "$0")' exec "\$host" sh -c "\$*"
EOF
    chmod +x "$DIR/rsh"
    trap - ERR
    status
}

run_as() {  # exec [--as NAME] HOST CMD...
    local as=""
    if [ "${1:-}" = --as ]; then as="$2"; shift 2; fi
    [ $# -ge 2 ] || die "exec needs a host and a command"
    local host="$1"; shift
    index_of "$host" >/dev/null
    # A mount namespace of its own for the command, so that the bind mount of the hosts file
    # is seen by it alone and goes away with it; a UTS namespace for its hostname.
    exec nsenter --net="/run/netns/$PREFIX-$host" -- unshare --uts --mount --propagation private \
        -- sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
        sh "$DIR/hosts" "${as:-$host}" "$@"
}

alias_names() {  # alias HOST NAME...: rewritten in place, so that running commands see it too
    local host="$1"; shift
    local address
    address="$SUBNET.$(index_of "$host")"
    local updated
    updated="$(awk -v a="$address" -v n="$*" '$1 == a { $0 = $0 " " n } { print }' "$DIR/hosts")"
    printf '%s\n' "$updated" > "$DIR/hosts"
}

ancestors() {  # this script's process and the processes above it: never killed by `down`
    local pid=$$
    while [ "$pid" -gt 1 ]; do
        echo "$pid"
        pid="$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 1)"
    done
}

pids_on() {  # every process in namespace $1 but this script's ancestors
    ip netns pids "$1" 2>/dev/null | grep -vxF -f <(ancestors) || true
}

signal_namespace() {  # $1 namespace, $2 signal
    local pids
    pids="$(pids_on "$1")"
    if [ -n "$pids" ]; then kill "-$2" $pids 2>/dev/null || true; fi
}

stop_namespace() {  # TERM, up to 5 s to exit, then KILL
    signal_namespace "$1" TERM
    for _ in $(seq 50); do
        [ -z "$(pids_on "$1")" ] && return
        sleep 0.1
    done
    signal_namespace "$1" KILL
    for _ in $(seq 50); do
        [ -z "$(pids_on "$1")" ] && return
        sleep 0.1
    done
    die "processes in $1 did not exit: $(pids_on "$1" | tr '\n' ' ')"
}

down() {
    local ns
    for ns in $(our_namespaces); do stop_namespace "$ns"; done
    for ns in $(our_namespaces); do ip netns del "$ns"; done
    rm -rf "$DIR"
    rmdir /run/lockstep-hosts 2>/dev/null || true
}

status() {
    require_up
    local i=0 name
    for name in $(names); do
        i=$((i + 1))
        printf '%s\t%s.%s\t%s processes\tnamespace %s\n' "$name" "$SUBNET" "$i" \
            "$(pids_on "$PREFIX-$name" | wc -l)" "$PREFIX-$name"
    done
}

command="${1:-}"
shift || true
case "$command" in
    up) up "$@" ;;
    exec) run_as "$@" ;;
    alias) [ $# -ge 2 ] || die "alias needs a host and names"; alias_names "$@" ;;
    addr) [ $# -eq 1 ] || die "addr needs a host"; index_of "$1" >/dev/null
          echo "$SUBNET.$(index_of "$1")" ;;
    kill) [ $# -ge 1 ] || die "kill needs a host"; index_of "$1" >/dev/null
          signal_namespace "$PREFIX-$1" "${2:-KILL}" ;;
    status) status ;;
    down) down ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
