#!/usr/bin/env python3
"""Resident memory over a long generation: runs `pteron generate --ignore-eos` for N tokens
(streaming) and samples the process's VmRSS every 0.5 s, together with the bytes of text
streamed so far. Prints the samples, the RSS once the first tenth of the text has streamed,
and the peak (flat memory: the two agree; the KV cache is allocated at load, so nothing grows
with the context).

    /opt/etvenv/bin/python bench/llm_memory.py MODEL.pte TOKENIZER.json [--tokens 2000]
"""

import argparse
import os
import subprocess
import threading
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pte")
    ap.add_argument("tokenizer")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--pteron", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", "target"), "release", "pteron"))
    args = ap.parse_args()
    cmd = [args.pteron, "generate", args.pte, "--tokenizer", args.tokenizer, "--prompt",
           args.prompt, "--max-new-tokens", str(args.tokens), "--ignore-eos",
           "--threads", str(args.threads)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    streamed = [0]
    tail = []

    def reader():
        while chunk := p.stdout.read1(4096):
            streamed[0] += len(chunk)
            tail.append(chunk)

    t = threading.Thread(target=reader)
    t.start()
    samples = []
    t0 = time.time()
    while p.poll() is None:
        try:
            samples.append((time.time() - t0, streamed[0], rss_kib(p.pid)))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.5)
    t.join()
    err = p.stderr.read().decode(errors="replace")
    for s in samples[:: max(1, len(samples) // 20)]:
        print(f"t {s[0]:7.1f} s  text {s[1]:7d} B  RSS {s[2] / 1024:8.1f} MiB")
    total = streamed[0]
    after = [s for s in samples if s[1] >= total / 10]
    early = after[0][2] if after else 0
    peak = max(s[2] for s in samples) if samples else 0
    print(f"exit {p.returncode}; RSS after the first tenth of the text: {early / 1024:.1f} MiB; "
          f"peak over the run: {peak / 1024:.1f} MiB; last: {samples[-1][2] / 1024:.1f} MiB")
    print(err.strip().splitlines()[-1] if err.strip() else "")


if __name__ == "__main__":
    main()
