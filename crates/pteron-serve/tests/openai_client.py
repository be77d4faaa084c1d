"""`pteron serve` through the official OpenAI Python client (PyPI's `openai`), on loopback,
with the tiny Llama fixture:

  * a chat completion, non-streamed and streamed (the same text, usage in both);
  * completions of the fixture's golden prompts: ExecuTorch's greedy text, streamed or not;
  * malformed requests (bad JSON, a missing field, negative `max_tokens`, a body over the
    limit, an unknown model) get 4xx JSON errors, and the server goes on serving;
  * a bounded load test: CLIENTS threads, each with its own client, REQUESTS streamed
    completions each, every answer checked against the golden text; prints requests/s and
    the time to first token (p50/p99; queueing included: one model thread serves them all).

Usage (from the repository root; CI: tools/dev/serve_openai_tests.sh):
    python crates/pteron-serve/tests/openai_client.py PTERON_BINARY [CLIENTS] [REQUESTS]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "testdata" / "llm" / "tiny"
MAX_BODY = 65536


def start(binary: str, clients: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [binary, "serve", str(TINY / "fp32.pte"), "--tokenizer", str(TINY / "tokenizer.json"),
         "--port", "0", "--threads", "1", "--model-name", "tiny",
         "--max-queue", str(2 * clients), "--max-body-bytes", str(MAX_BODY)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    prefix = "listening on http://"
    if not line.startswith(prefix):
        proc.kill()
        raise SystemExit(f"pteron serve did not start: {line!r} {proc.stderr.read()}")
    return proc, line[len(prefix):]


def raw_post(addr: str, path: str, body: bytes) -> tuple[int, dict]:
    """A request the client library would not send; returns (status, JSON body)."""
    req = urllib.request.Request(f"http://{addr}{path}", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main() -> None:
    binary = sys.argv[1]
    clients = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    requests = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    goldens = json.loads((TINY / "goldens.json").read_text())["variants"]["fp32"]["prompts"]
    cases = [(p["prompt"], p["generated_text"], len(p["generated_ids"])) for p in goldens.values()]
    proc, addr = start(binary, clients)
    try:
        client = openai.OpenAI(base_url=f"http://{addr}/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["tiny"]

        # Chat: non-streamed, then streamed; the same text.
        messages = [{"role": "user", "content": "Hi"}]
        r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12,
                                           temperature=0)
        text = r.choices[0].message.content
        assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
        assert r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length", r
        stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12,
                                                temperature=0, stream=True,
                                                stream_options={"include_usage": True})
        pieces, usage, finish = [], None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                pieces.append(c.delta.content or "")
                finish = c.finish_reason or finish
        assert "".join(pieces) == text, ("".join(pieces), text)
        assert usage.completion_tokens == 12 and finish == "length", (usage, finish)
        print(f"chat: {text!r} (streamed the same, {len(pieces)} chunks)")

        # Completions of the golden prompts: ExecuTorch's greedy text.
        for prompt, want, n in cases:
            extra = {"skip_special_tokens": False}
            r = client.completions.create(model="tiny", prompt=prompt, max_tokens=n,
                                          temperature=0, extra_body=extra)
            assert r.choices[0].text == want, (prompt, r.choices[0].text, want)
            s = client.completions.create(model="tiny", prompt=prompt, max_tokens=n,
                                          temperature=0, stream=True, extra_body=extra)
            assert "".join(c.choices[0].text for c in s if c.choices) == want
        print(f"completions: ExecuTorch's text for {len(cases)} golden prompts")

        # Malformed requests: 4xx JSON errors.
        for path in ["/v1/chat/completions", "/v1/completions"]:
            status, body = raw_post(addr, path, b"{not json")
            assert status == 400 and body["error"]["message"], (status, body)
        status, body = raw_post(addr, "/v1/chat/completions", b'{"model": "tiny"}')
        assert status == 400 and "error" in body, (status, body)
        status, body = raw_post(addr, "/v1/completions",
                                b'{"prompt": "' + b"x" * (2 * MAX_BODY) + b'"}')
        assert status == 413 and "error" in body, (status, body)
        try:
            client.chat.completions.create(model="tiny", messages=messages, max_tokens=-3)
            raise AssertionError("negative max_tokens accepted")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.body, e
        try:
            client.chat.completions.create(model="no-such-model", messages=messages)
            raise AssertionError("unknown model accepted")
        except openai.NotFoundError as e:
            assert e.status_code == 404 and e.body, e
        r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12,
                                           temperature=0)
        assert r.choices[0].message.content == text
        print("malformed requests: 400, 400, 413, 400, 404; the server goes on serving")

        # Load: every answer checked; time to first token from each request's start.
        ttft, lock = [], threading.Lock()

        def worker(w: int) -> int:
            c = openai.OpenAI(base_url=f"http://{addr}/v1", api_key="unused", max_retries=0)
            for i in range(requests):
                prompt, want, n = cases[(w + i) % len(cases)]
                t0 = time.perf_counter()
                first, got = None, []
                for chunk in c.completions.create(model="tiny", prompt=prompt, max_tokens=n,
                                                  temperature=0, stream=True,
                                                  extra_body={"skip_special_tokens": False}):
                    if chunk.choices and chunk.choices[0].text:
                        first = first or time.perf_counter()
                        got.append(chunk.choices[0].text)
                assert "".join(got) == want, (w, i, "".join(got))
                with lock:
                    ttft.append(first - t0)
            return requests

        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            done = sum(pool.map(worker, range(clients)))
        wall = time.perf_counter() - t0
        ttft.sort()
        p = lambda q: ttft[min(len(ttft) - 1, int(q * len(ttft)))] * 1e3  # noqa: E731
        print(f"load: {clients} clients x {requests} requests, all {done} answers correct; "
              f"{done / wall:.1f} requests/s, {done * cases[0][2] / wall:.0f} generated tok/s; "
              f"time to first token p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms "
              f"(min {ttft[0] * 1e3:.1f}, mean {statistics.mean(ttft) * 1e3:.1f})")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print("openai_client: ok")


if __name__ == "__main__":
    main()
