#!/usr/bin/env bash
# Hashes the outputs `pteron run` gives for every committed program (fixtures with their
# inputs, the op suite and the LLM fixtures on deterministic inputs), one line per run:
#   <program> <options> <sha256 of each output, or ERR>
# Two binaries' lists compared with `diff` show whether a refactor changed any number.
# Usage: tools/dev/output_hashes.sh PTERON_BINARY > hashes.txt
set -u
bin=$1
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # program, options...
  local pte=$1; shift
  local dir; dir=$(dirname "$pte")
  local inputs=()
  if [ "$(basename "$pte")" = model.pte ]; then
    for i in "$dir"/input[0-9]*.npy; do [ -e "$i" ] && inputs+=(--input "$i"); done
  fi
  local data=()
  [ -e "$dir/model.ptd" ] && data=(--data "$dir/model.ptd")
  rm -rf "$tmp/out"
  if "$bin" run "$pte" "${inputs[@]}" "${data[@]}" --output-dir "$tmp/out" "$@" >/dev/null 2>&1; then
    echo "$pte $* $(cd "$tmp/out" && sha256sum -- * | cut -c1-16 | tr '\n' ' ')"
  else
    echo "$pte $* ERR"
  fi
}
for pte in testdata/models/*/model.pte testdata/xnnpack/*/model.pte testdata/llm/*/*.pte; do
  for t in 1 2 3; do run "$pte" --threads "$t"; done
  run "$pte" --threads 2 --channels-first
  run "$pte" --threads 1 --portable
done
for pte in testdata/ops/*/*.pte; do
  run "$pte" --threads 1
  run "$pte" --threads 1 --portable
done
