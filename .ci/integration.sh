#!/usr/bin/env bash
# Installs what the server package's integration tests need (a real
# Prometheus and a headless Chromium, from Debian's packages) and exports
# where they are. Source it from .ci/run before `go test`:
#   . .ci/integration.sh
# The tests skip with a message when these variables are unset and the
# programs are not on PATH.

(
	set -euo pipefail
	need=()
	command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
	command -v chromium >/dev/null 2>&1 || need+=(chromium)
	if ((${#need[@]})); then
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${need[@]}" ca-certificates fonts-dejavu-core >/dev/null
	fi
) || { echo "integration: installing prometheus and chromium failed" >&2; return 1 2>/dev/null || exit 1; }

export GRPO_PROMETHEUS="$(command -v prometheus)"
export GRPO_CHROMIUM="$(command -v chromium)"
export GRPO_ARTIFACTS="${GRPO_ARTIFACTS:-$PWD/.ci/artifacts}"
mkdir -p "$GRPO_ARTIFACTS"
echo "integration: prometheus $GRPO_PROMETHEUS, chromium $GRPO_CHROMIUM, artifacts $GRPO_ARTIFACTS" >&2
