#!/usr/bin/env bash
# deploy/cpu/env.sh [LOG]
#
# Creates (once) or reuses the Python environment of the CPU stack and prints
# its path. The environment is keyed by a content hash of requirements.txt and
# the Python version: $GRPO_CACHE/venv-<hash> (default ~/.cache/grpo). It is
# installed with --no-deps from the fully pinned requirements.txt (see there
# why). GRPO_VENV names an existing environment to use instead; GRPO_PYTHON
# the interpreter (default python3.11). pip's output goes to LOG (default
# stderr). Exits non-zero with a message on failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log="${1:-/dev/stderr}"
if [[ -n "${GRPO_VENV:-}" ]]; then
  [[ -x "$GRPO_VENV/bin/python" ]] || { echo "environment: GRPO_VENV=$GRPO_VENV has no bin/python" >&2; exit 1; }
  echo "$GRPO_VENV"
  exit 0
fi
py="${GRPO_PYTHON:-python3.11}"
command -v "$py" >/dev/null || { echo "environment: no $py on PATH (set GRPO_PYTHON to a Python 3.11)" >&2; exit 1; }
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ "$pyver" == "3.11" ]] || {
  echo "environment: $py is Python $pyver; requirements.txt is pinned for 3.11 (set GRPO_PYTHON)" >&2
  exit 1
}
cache="${GRPO_CACHE:-$HOME/.cache/grpo}"
mkdir -p "$cache"
key=$( (cat "$here/requirements.txt"; echo "python=$pyver") | sha256sum | cut -c1-12)
venv="$cache/venv-$key"
exec 9>"$cache/.venv-$key.lock"
flock 9 # two at once: one builds, the other waits and reuses
if [[ ! -f "$venv/.complete" ]]; then
  echo "environment: creating $venv (about 6 GB; a few minutes)" >&2
  rm -rf "$venv"
  # built in place: a venv's scripts name their interpreter by path
  if ! { "$py" -m venv "$venv" &&
    "$venv/bin/pip" install --no-deps --disable-pip-version-check -r "$here/requirements.txt"; } >"$log" 2>&1; then
    rm -rf "$venv"
    echo "environment: pip install -r $here/requirements.txt failed${1:+ (see $1)}" >&2
    exit 1
  fi
  touch "$venv/.complete"
fi
echo "$venv"
