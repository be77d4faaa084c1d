#!/usr/bin/env bash
# The Python package's checks: build the abi3 wheel with maturin, install it into a fresh venv
# (numpy is its only dependency: no torch), run the pytest suite over the committed fixtures,
# and run an executorch.runtime script with only its import changed.
# Usage: [PROFILE=dev] tools/dev/python_tests.sh [VENV_DIR]   (default: target/py-venv)
# PROFILE: cargo's profile for the wheel, default `wheel` (what is published: fat LTO); CI
# passes `dev`, whose compiled dependencies `cargo test --workspace` left behind (not `test`:
# maturin runs `cargo rustc`, which in the test profile builds a test harness, not a library).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${1:-target/py-venv}"
python3 -m venv "$venv"
venv="$(cd "$venv" && pwd)"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "maturin>=1.8,<2" "pytest>=7" "numpy>=1.21"

rm -rf target/wheels
"$venv/bin/maturin" build --profile "${PROFILE:-wheel}" --quiet -m crates/pteron-py/Cargo.toml -o target/wheels
"$venv/bin/pip" install --quiet --force-reinstall target/wheels/pteron-*.whl
ls -l target/wheels/

# Run from the tests' folder so that `import pteron` is the installed wheel, not the sources.
(cd crates/pteron-py/tests && "$venv/bin/python" -m pytest -q -p no:cacheprovider)

# The executorch.runtime script, import swapped, without torch.
if "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "python_tests: torch is installed in $venv; the no-torch check needs a venv without it" >&2
  exit 1
fi
script="$(mktemp -d)/compat.py"
sed 's/^from executorch.runtime import Runtime$/from pteron.runtime import Runtime/' \
  examples/python/executorch_compat.py >"$script"
grep -q '^from pteron.runtime import Runtime$' "$script"
for fixture in testdata/models/mobilenet_v2_small testdata/xnnpack/mobilenet_v2_small; do
  out="$("$venv/bin/python" "$script" "$fixture")"
  echo "$out"
  # Every output within the fixtures' tolerance of ExecuTorch's.
  echo "$out" | "$venv/bin/python" -c '
import re, sys
diffs = [float(m) for m in re.findall(r"max\|diff\| (\S+)", sys.stdin.read())]
assert diffs and max(diffs) < 1e-4, diffs
'
done
echo "python_tests: ok"
