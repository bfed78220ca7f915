#!/usr/bin/env bash
# Install strategist and everything its tests need, into the active Python environment.
# System packages: Debian's chromium (the dashboard's browser tests) and iproute2 (the testbed).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
    else
        echo "install.sh: please install ${need[*]} (needs root and apt-get)" >&2
    fi
fi
python -m pip install -q -e ".[dev]"
