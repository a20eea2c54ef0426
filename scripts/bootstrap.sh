#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine (run as root): Debian packages, then .venv with pinned deps.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(iverilog mininet bridge-utils tshark iproute2 tcpdump ethtool iputils-ping netsniff-ng make gcc cpp
              chromium chromium-driver)

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: missing Debian packages (${missing[*]}); run as root: apt-get install ${missing[*]}" >&2
        exit 1
    fi
    echo "bootstrap: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
stamp=.venv/.starpulse-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "bootstrap: installing the pinned Python packages into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[dev]'
    echo "$want" > "$stamp"
fi
# the P4Runtime clients the tests drive the switch with pin other protobufs (p4runtime-shell < 3.21, finsy 6):
# each gets its own venv with its own exact pins
for pair in .venv-p4rt-clients:scripts/p4runtime-clients.txt .venv-p4rt-finsy:scripts/p4runtime-finsy.txt; do
    cvenv=${pair%%:*}
    creq=${pair#*:}
    cstamp=$cvenv/.starpulse-installed
    cwant=$(sha256sum "$creq" | cut -d' ' -f1)
    if [ ! -f "$cstamp" ] || [ "$(cat "$cstamp")" != "$cwant" ]; then
        echo "bootstrap: installing a P4Runtime client ($creq) into $cvenv"
        [ -x "$cvenv/bin/python" ] || "$PY" -m venv "$cvenv"
        "$cvenv/bin/python" -m pip install -q -r "$creq"
        echo "$cwant" > "$cstamp"
    fi
done
echo "bootstrap: ready (.venv, $(.venv/bin/python --version); P4Runtime clients in .venv-p4rt-clients, .venv-p4rt-finsy)"
