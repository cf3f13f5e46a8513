#!/usr/bin/env bash
# Install the schedulers and launchers that the multi-node tests run for real on the hosts of
# scripts/hosts.sh: SLURM 22.05 (slurmctld, slurmd, client commands), munge, Open MPI and
# MPICH, and ping, from Debian's packages. (SageMaker's training toolkit comes from PyPI
# with the `test` extra.) Quick when everything is installed already; needs root and apt-get.
#
# The packages' own services are not started: the tests start their own daemons, with their
# own configuration, on the hosts, and stop them.
set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge openmpi-bin mpich iputils-ping iproute2 util-linux)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }

missing=()
for package in "${PACKAGES[@]}"; do
    installed "$package" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "schedulers already installed: ${PACKAGES[*]}"
    exit 0
fi
if ! command -v apt-get >/dev/null || [ "$(id -u)" != 0 ]; then
    echo "install-schedulers.sh: missing ${missing[*]}; installing them needs apt-get as root." \
        "HINT: install these Debian packages (or your distribution's) by hand" >&2
    exit 1
fi

# A policy that keeps the packages from starting their services while they install,
# unless the machine has one already (then it decides).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}"
