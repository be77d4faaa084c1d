#!/usr/bin/env bash
# Builds libpteron_c (static; cargo's profile PROFILE, default release: CI passes `test`, whose
# compiled dependencies `cargo test --workspace` left behind), compiles the C examples against crates/pteron-c/include/
# pteron.h with the system C compiler, runs them on committed fixtures and checks their output:
# MobileNetV2's logits against ExecuTorch's, the tiny LLM's greedy text against ExecuTorch's
# tokens decoded, and a generation the callback stops.
set -euo pipefail
cd "$(dirname "$0")/../.."
profile="${PROFILE:-release}"
cargo build --profile "$profile" --locked -p pteron-c
dir=$profile
case $profile in dev | test) dir=debug ;; esac
lib=target/$dir/libpteron_c.a
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ex in classify generate; do
  cc -std=c99 -Wall -Wextra -Werror -O2 -Icrates/pteron-c/include "examples/c/$ex.c" "$lib" \
    -lpthread -ldl -lm -o "$out/$ex"
done

m=testdata/models/mobilenet_v2_small
"$out/classify" "$m/model.pte" "$m/input0.npy" "$m/expected0.npy"

llm=testdata/llm/tiny
prompt="Beautiful is better than ugly."
"$out/generate" "$llm/fp32.pte" "$llm/tokenizer.json" "$prompt" 64 > "$out/text" 2> "$out/stats"
cat "$out/stats"
python3 - "$out/text" "$llm/goldens.json" <<'PY'
import json, sys
got = open(sys.argv[1], encoding="utf-8").read()
want = json.load(open(sys.argv[2]))["variants"]["fp32"]["prompts"]["short"]["generated_text"]
if got != want:
    sys.exit(f"generated text differs from the golden:\n got  {got!r}\n want {want!r}")
print(f"generate: {len(got)} characters, equal to ExecuTorch's tokens decoded")
PY
grep -q "64 generated, finish 2" "$out/stats"

# A callback that returns non-zero after 5 pieces stops the generation (finish 4).
"$out/generate" "$llm/fp32.pte" "$llm/tokenizer.json" "$prompt" 64 5 > /dev/null 2> "$out/stats"
grep -q "finish 4" "$out/stats" || { cat "$out/stats"; exit 1; }
# The C++ wrapper (pteron.hpp) over the same library.
c++ -std=c++17 -Wall -Wextra -Werror -O2 -Icrates/pteron-c/include examples/c/classify.cpp "$lib" \
  -lpthread -ldl -lm -o "$out/classify_cpp"
"$out/classify_cpp" "$m/model.pte" "$m/input0.npy" "$m/expected0.npy" "$llm/fp32.pte" "$llm/tokenizer.json"
echo "C examples: ok"
