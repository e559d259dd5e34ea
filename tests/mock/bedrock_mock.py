#!/usr/bin/env python3
"""A Bedrock runtime for the gateway's tests: checks every request's SigV4
signature with botocore's own signer (an implementation independent of the
gateway's) or its Bedrock API key, records what it received, and answers
`invoke`, `invoke-with-response-stream`, `converse`, `converse-stream` and
`count-tokens` (foundation model ids only, as Bedrock) as Bedrock does: JSON bodies, and streams in AWS's binary event-stream framing
(prelude and message CRCs, `chunk` events whose `bytes` are base64 messages
events for invoke, Converse's typed events otherwise), usage with cache
reads and writes.

Usage: bedrock_mock.py CONFIG_JSON
  CONFIG_JSON: {"region": "us-east-1",
                "credentials": {"AKID": {"secret": "...", "token": null}},
                "api_keys": ["..."]}
Prints "listening PORT" once it serves on 127.0.0.1:PORT. GET /_requests
returns what it received, in order. Models whose id contains "exception"
fail mid-stream with a throttlingException frame.
"""
import base64
import datetime
import json
import struct
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

# What every answer bills: uncached input, cache reads, cache writes, output.
INPUT, CACHE_READ, CACHE_WRITE, OUTPUT = 11, 20, 30, 7
TEXT = "Hello from Bedrock"
BAD_SIGNATURE = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
)

CONFIG = {}
RECEIVED = []
LOCK = threading.Lock()


def frame(headers, payload):
    """One event-stream message: prelude (total and headers length, CRC),
    string headers, payload, message CRC."""
    encoded = b""
    for name, value in headers.items():
        name_b, value_b = name.encode(), value.encode()
        encoded += struct.pack(">B", len(name_b)) + name_b + b"\x07" + struct.pack(">H", len(value_b)) + value_b
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message) & 0xFFFFFFFF)


def event(kind, body):
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, json.dumps(body).encode())


def exception(kind, message):
    headers = {":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"}
    return frame(headers, json.dumps({"message": message}).encode())


def check_signature(handler, body):
    """None when the request is signed by a known key (or carries a known
    API key), else (status, error type, message)."""
    auth = handler.headers.get("authorization", "")
    if auth.startswith("Bearer "):
        if auth[len("Bearer "):] in CONFIG.get("api_keys", []):
            return None
        return 403, "AccessDeniedException", "Authentication failed: Please make sure your API Key is valid."
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return 403, "MissingAuthenticationTokenException", "Missing Authentication Token"
    fields = dict(part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    akid, date, region, service, terminator = fields["Credential"].split("/")
    known = CONFIG.get("credentials", {}).get(akid)
    if known is None:
        return 403, "UnrecognizedClientException", "The security token included in the request is invalid."
    token = handler.headers.get("x-amz-security-token")
    if token != known.get("token"):
        return 403, "UnrecognizedClientException", "The security token included in the request is invalid."
    if (region, service, terminator) != (CONFIG["region"], "bedrock", "aws4_request"):
        return 403, "InvalidSignatureException", f"Credential should be scoped to a valid region: {region}/{service}"
    stamp = handler.headers.get("x-amz-date", "")
    signed = fields["SignedHeaders"].split(";")
    if "host" not in signed or "x-amz-date" not in signed or not stamp.startswith(date):
        return 403, "InvalidSignatureException", "host and x-amz-date must be signed"
    when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 300:
        return 403, "InvalidSignatureException", "Signature expired"
    # The request as it arrived: its raw (encoded) path and the headers it
    # says it signed; botocore recomputes the signature from them.
    headers = {name: handler.headers.get(name, "") for name in signed}
    request = AWSRequest("POST", "http://" + handler.headers["host"] + handler.path, headers=headers, data=body)
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(akid, known["secret"], known.get("token")), "bedrock", region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if expected != fields["Signature"]:
        return 403, "InvalidSignatureException", BAD_SIGNATURE
    return None


def wants_tool(request):
    """The first tool's name when the model should call one now."""
    tools = request.get("tools") or [t.get("toolSpec") for t in request.get("toolConfig", {}).get("tools", [])]
    tools = [t for t in tools if t and t.get("name")]
    if not tools:
        return None
    last = (request.get("messages") or [{}])[-1].get("content")
    if isinstance(last, list) and any(b.get("type") == "tool_result" or "toolResult" in b for b in last):
        return None
    return tools[0]["name"]


def messages_usage():
    return {
        "input_tokens": INPUT,
        "cache_creation_input_tokens": CACHE_WRITE,
        "cache_read_input_tokens": CACHE_READ,
        "output_tokens": OUTPUT,
    }


def converse_usage():
    return {
        "inputTokens": INPUT,
        "outputTokens": OUTPUT,
        "totalTokens": INPUT + CACHE_READ + CACHE_WRITE + OUTPUT,
        "cacheReadInputTokens": CACHE_READ,
        "cacheWriteInputTokens": CACHE_WRITE,
    }


def invoke(model, request):
    tool = wants_tool(request)
    content = [{"type": "text", "text": TEXT}]
    if tool:
        content.append({"type": "tool_use", "id": "toolu_bdrk_01", "name": tool, "input": {"city": "Paris"}})
    return {
        "id": "msg_bdrk_01", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None, "usage": messages_usage(),
    }


def invoke_stream(model, request):
    tool = wants_tool(request)
    start_usage = dict(messages_usage(), output_tokens=1)
    events = [
        {"type": "message_start", "message": {"id": "msg_bdrk_01", "type": "message", "role": "assistant",
                                              "model": model, "content": [], "stop_reason": None,
                                              "stop_sequence": None, "usage": start_usage}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": TEXT[:9]}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": TEXT[9:]}},
        {"type": "content_block_stop", "index": 0},
    ]
    if tool:
        events += [
            {"type": "content_block_start", "index": 1,
             "content_block": {"type": "tool_use", "id": "toolu_bdrk_01", "name": tool, "input": {}}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":"}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"Paris\"}"}},
            {"type": "content_block_stop", "index": 1},
        ]
    events += [
        {"type": "message_delta", "delta": {"stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": OUTPUT}},
        {"type": "message_stop", "amazon-bedrock-invocationMetrics": {
            "inputTokenCount": INPUT, "outputTokenCount": OUTPUT, "invocationLatency": 120, "firstByteLatency": 40}},
    ]
    frames = [event("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()}) for e in events]
    if "exception" in model:
        frames = frames[:3] + [exception("throttlingException", "Too many requests, please wait before trying again.")]
    return frames


def converse(request):
    tool = wants_tool(request)
    content = [{"text": TEXT}]
    if tool:
        content.append({"toolUse": {"toolUseId": "tooluse_01", "name": tool, "input": {"city": "Paris"}}})
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "tool_use" if tool else "end_turn", "usage": converse_usage(), "metrics": {"latencyMs": 120},
    }


def converse_stream(model, request):
    tool = wants_tool(request)
    frames = [
        event("messageStart", {"role": "assistant"}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": TEXT[:9]}}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": TEXT[9:]}}),
        event("contentBlockStop", {"contentBlockIndex": 0}),
    ]
    if tool:
        frames += [
            event("contentBlockStart", {"contentBlockIndex": 1,
                                        "start": {"toolUse": {"toolUseId": "tooluse_01", "name": tool}}}),
            event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"city\":"}}}),
            event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": "\"Paris\"}"}}}),
            event("contentBlockStop", {"contentBlockIndex": 1}),
        ]
    frames += [
        event("messageStop", {"stopReason": "tool_use" if tool else "end_turn"}),
        event("metadata", {"usage": converse_usage(), "metrics": {"latencyMs": 120}}),
    ]
    if "exception" in model:
        frames = frames[:2] + [exception("throttlingException", "Too many requests, please wait before trying again.")]
    return frames


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, error_type=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if error_type:
            self.send_header("x-amzn-errortype", error_type)
        self.end_headers()
        self.wfile.write(data)

    def stream(self, frames):
        self.send_response(200)
        self.send_header("content-type", "application/vnd.amazon.eventstream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-amzn-bedrock-content-type", "application/json")
        self.end_headers()
        for piece in frames:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self):
        if self.path == "/_requests":
            with LOCK:
                self.reply(200, RECEIVED)
        else:
            self.reply(404, {"message": "not found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        parts = self.path.split("?")[0].split("/")
        if len(parts) != 4 or parts[1] != "model":
            return self.reply(404, {"message": "UnknownOperationException"}, "UnknownOperationException")
        model, op = unquote(parts[2]), parts[3]
        refused = check_signature(self, body)
        try:
            request = json.loads(body or b"null")
        except ValueError:
            request = None
        with LOCK:
            RECEIVED.append({
                "path": self.path, "model": model, "operation": op, "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": request, "refused": refused is not None,
            })
        if refused:
            status, kind, message = refused
            return self.reply(status, {"message": message}, kind)
        if not isinstance(request, dict):
            return self.reply(400, {"message": "Malformed input request"}, "ValidationException")
        if op in ("invoke", "invoke-with-response-stream"):
            problems = [f for f in ("model", "stream") if f in request]
            if request.get("anthropic_version") != "bedrock-2023-05-31" or problems:
                message = f"Malformed input request: extraneous key {problems} or bad anthropic_version"
                return self.reply(400, {"message": message}, "ValidationException")
            if op == "invoke":
                return self.reply(200, invoke(model, request))
            return self.stream(invoke_stream(model, request))
        if op in ("converse", "converse-stream"):
            if "model" in request or not isinstance(request.get("messages"), list):
                return self.reply(400, {"message": "Malformed input request"}, "ValidationException")
            if op == "converse":
                return self.reply(200, converse(request))
            return self.stream(converse_stream(model, request))
        if op == "count-tokens":
            try:
                invoke_body = json.loads(base64.b64decode(request["input"]["invokeModel"]["body"]))
            except (KeyError, TypeError, ValueError):
                return self.reply(400, {"message": "Malformed input request"}, "ValidationException")
            if "." in model.split("anthropic.")[0]:
                return self.reply(400, {"message": "The provided model doesn't support counting tokens."},
                                  "ValidationException")
            # One token per four characters of the messages, at least one.
            return self.reply(200, {"inputTokens": max(1, len(json.dumps(invoke_body.get("messages"))) // 4)})
        return self.reply(404, {"message": "UnknownOperationException"}, "UnknownOperationException")


def main():
    CONFIG.update(json.loads(sys.argv[1]))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    # Ends when the test process closes our stdin (or kills us).
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
