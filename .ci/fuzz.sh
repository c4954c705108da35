#!/usr/bin/env bash
# Fuzz every parser of untrusted input for a bounded time each
# (FUZZTIME, default 10s). Found crashers land in the package's
# testdata/fuzz/ and fail this script; commit them as regression seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
FUZZTIME="${FUZZTIME:-10s}"
targets=(
  "./server FuzzConfigBody"          # daemon config bodies: aliases, paths, parse, peers, limits
  "./config FuzzParse"               # config documents (CLI and daemon)
  "./rollout FuzzDecide"             # tool-call parsing of model answers
  "./rollout FuzzParseState"         # observation parsing
  "./inference FuzzDecodeCompletion" # chat completion answers
  "./inference FuzzParseQueueStats"  # vLLM /metrics text
  "./trainer FuzzDecodeJob"          # trainer job answers
  "./checkpoint FuzzStoreRecords"    # store records
  "./internal/httpx FuzzParseErrorBody"
  "./refmodel FuzzChatCompletion"
  "./refmodel FuzzSamplesOf"
)
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  echo "== $pkg $name ($FUZZTIME)"
  if ! out=$(go test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "$pkg" 2>&1); then
    echo "$out" | tail -n 40
    echo "fuzz.sh: $pkg $name failed" >&2
    exit 1
  fi
  echo "$out" | grep -E 'elapsed|^ok' | tail -n 2
done
