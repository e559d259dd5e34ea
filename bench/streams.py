#!/usr/bin/env python3
"""Open streams held at once, for bench/run's memory-per-stream figure.

  streams.py upstream PORT
      a messages-API upstream that answers every POST with the start of a
      stream (message_start, content_block_start, one delta) and then holds
      it open until the client goes away
  streams.py hold URL KEY PID N
      opens N streamed /v1/messages requests to URL, waits until each has
      its first delta, reads VmRSS of process PID before and while they are
      open, closes them and prints "<RSS before KiB> <RSS open KiB> <N>"
"""

import asyncio
import json
import sys

START = "".join(
    f"event: {name}\ndata: {json.dumps(data)}\n\n"
    for name, data in [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_slow", "type": "message", "role": "assistant", "model": "bench-slow", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "held"}}),
    ]
).encode()


async def serve_one(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            writer.write(b"%x\r\n%s\r\n" % (len(START), START))
            await writer.drain()
            # Held until the gateway drops the connection (its client went away).
            await reader.read()
            return
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def upstream(port):
    server = await asyncio.start_server(serve_one, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


async def open_stream(host, port, path, key):
    body = json.dumps({"model": "bench-slow", "max_tokens": 64, "stream": True,
                       "messages": [{"role": "user", "content": "hold the line"}]}).encode()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
                 f"anthropic-version: 2023-06-01\r\nx-api-key: {key}\r\n"
                 f"content-length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        status = head.split(b"\r\n")[0].decode()
        raise RuntimeError(f"stream refused: {status}")
    seen = b""
    while b"content_block_delta" not in seen:
        chunk = await reader.read(4096)
        if not chunk:
            raise RuntimeError("stream ended before its first delta")
        seen += chunk
    return writer


async def hold(url, key, pid, n):
    from urllib.parse import urlsplit
    u = urlsplit(url)
    # A few streams first, so pools and buffers the first requests allocate
    # are not charged to the held ones.
    for writer in [await open_stream(u.hostname, u.port, u.path, key) for _ in range(8)]:
        writer.close()
    before = rss_kib(pid)
    writers = []
    for start in range(0, n, 100):
        writers += await asyncio.gather(*(open_stream(u.hostname, u.port, u.path, key)
                                          for _ in range(start, min(n, start + 100))))
    during = rss_kib(pid)
    for writer in writers:
        writer.close()
    print(before, during, n)


def main():
    if sys.argv[1] == "upstream":
        asyncio.run(upstream(int(sys.argv[2])))
    else:
        url, key, pid, n = sys.argv[2:6]
        asyncio.run(hold(url, key, int(pid), int(n)))


if __name__ == "__main__":
    main()
