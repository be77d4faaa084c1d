#!/usr/bin/env bash
# `pteron serve` through the official OpenAI Python client (PyPI's `openai`): chat and
# completions, streamed and not, against ExecuTorch's golden text; malformed requests; a
# bounded load test (8 clients × 20 requests) that prints requests/s and the time to first
# token. See crates/pteron-serve/tests/openai_client.py.
# Usage: tools/dev/serve_openai_tests.sh [PTERON_BINARY] [VENV_DIR]
# (default: target/debug/pteron, which `cargo test --workspace` builds; target/openai-venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
binary="${1:-target/debug/pteron}"
venv="${2:-target/openai-venv}"
if [ ! -x "$binary" ]; then
  cargo build -p pteron-cli --bin pteron
  binary=target/debug/pteron
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "openai>=1.50,<3"
"$venv/bin/python" -c 'import openai; print("openai", openai.__version__)'
"$venv/bin/python" crates/pteron-serve/tests/openai_client.py "$binary" 8 20
