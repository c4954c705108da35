#!/usr/bin/env bash
# The Python side's own checks: the reference trainer's pytest suite and
# ruff on deploy/ (the tiny-model builder's suite runs in deploy/cpu/ci.sh).
# The environment is the CPU stack's, created once and cached by the hash of
# deploy/cpu/requirements.txt (deploy/cpu/env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .ci/artifacts
venv=$(deploy/cpu/env.sh .ci/artifacts/pip.log)
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$venv/bin/ruff" check deploy
"$venv/bin/ruff" format --check deploy
(cd deploy/trainer && "$venv/bin/python" -m pytest -q -p no:cacheprovider)
