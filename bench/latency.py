#!/usr/bin/env python3
"""Latency helpers for bench/run.

  latency.py first-byte URL KEY
      median and p99 (ms) of the time from sending a streamed chat request
      (model bench-stream) to its first body byte, over 300 requests on one
      connection after 20 to warm up: "<p50> <p99>"
  latency.py fixed-row LABEL "p50 p99"… -- "p50 p99"…
      one markdown row of the fixed-rate table: medians over the rounds,
      each round's p99, and the median (and range) of each round's p99 over
      the nginx hop's in the same round (the rounds after --; none on the
      hop's own rows, whose labels start "nginx hop")
"""

import http.client
import json
import statistics
import sys
import time
import urllib.parse


def first_byte(url, key):
    u = urllib.parse.urlsplit(url)
    body = json.dumps({"model": "bench-stream", "stream": True, "max_tokens": 16,
                       "messages": [{"role": "user", "content": "hi"}]})
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    conn = http.client.HTTPConnection(u.hostname, u.port)
    times = []
    for i in range(320):
        start = time.perf_counter()
        conn.request("POST", u.path, body, headers)
        response = conn.getresponse()
        assert response.status == 200, response.status
        response.read(1)
        if i >= 20:  # warm-up
            times.append(time.perf_counter() - start)
        response.read()
    times.sort()
    print(f"{times[len(times) // 2] * 1000:.2f} {times[int(len(times) * 0.99)] * 1000:.2f}")


def fixed_row(label, rest):
    cut = rest.index("--")
    own = [tuple(map(float, r.split())) for r in rest[:cut]]
    hop = [tuple(map(float, r.split())) for r in rest[cut + 1:]]
    p50 = statistics.median(r[0] for r in own)
    p99 = statistics.median(r[1] for r in own)
    each = ", ".join(f"{r[1]:.2f}" for r in own)
    ratio = ""
    if not label.startswith("nginx hop"):
        ratios = [o[1] / h[1] for o, h in zip(own, hop)]
        ratio = f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}×)"
    print(f"| {label} | {p50:.2f} ms | {p99:.2f} ms | {each} | {ratio} |")


if __name__ == "__main__":
    if sys.argv[1] == "first-byte":
        first_byte(*sys.argv[2:4])
    else:
        fixed_row(sys.argv[2], sys.argv[3:])
