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
  "./trainer/art FuzzReadStream"           # ART's newline-delimited training stream
  "./trainer/art FuzzDetect"               # ART's /openapi.json
)
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  echo "== $pkg $name ($FUZZTIME)"
  if ! out=$(go test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "$pkg" 2>&1); then
    # On a loaded machine the fuzzing engine itself can end with "context
    # deadline exceeded" at the time limit; that is not a crasher (a crasher
    # is written to testdata/fuzz and named in the output).
    if grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written to' <<<"$out"; then
      echo "$out" | grep -E 'elapsed' | tail -n 1
      echo "(the engine timed out at the limit; no failing input)"
      continue
    fi
    echo "$out" | tail -n 40
    echo "fuzz.sh: $pkg $name failed" >&2
    exit 1
  fi
  echo "$out" | grep -E 'elapsed|^ok' | tail -n 2
done
