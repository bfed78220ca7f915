#!/usr/bin/env bash
# Install strategist and everything its tests need, into the active Python environment.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[dev]"
