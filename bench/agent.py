#!/usr/bin/env python3
"""Writes the agent-shaped workload for bench/run into one directory.

Request bodies (what a coding agent sends, deterministic, no randomness):
  messages.json        ~37 KB Claude-Code-like /v1/messages: system blocks,
                       tools with JSON schemas, a long tool-using history
  messages-chat.json   the same body for the model behind an openai channel
  responses.json       ~20 KB Codex-like /v1/responses: instructions, tools,
                       an input list with function calls and their outputs
Upstream answers, each a 300-event stream with usage where providers put it,
laid out as files an nginx upstream serves at the path the gateway calls:
  upstream/anthropic/v1/messages          messages SSE
  upstream/chat/v1/chat/completions       chat completions SSE
  upstream/codex/v1/responses             responses SSE

  bench/agent.py DIR
"""

import json
import os
import sys

EVENTS = 300
WORDS = ("the", "patch", "keeps", "every", "test", "green", "and", "reads", "one", "file")


def word(i):
    return WORDS[i % len(WORDS)] + " "


def schema(*fields):
    return {
        "type": "object",
        "properties": {name: {"type": kind, "description": f"The {name.replace('_', ' ')} to use."}
                       for name, kind in fields},
        "required": [fields[0][0]],
        "additionalProperties": False,
    }


TOOLS = [
    ("Bash", "Runs a shell command in a persistent session and returns its output.",
     [("command", "string"), ("timeout", "number"), ("description", "string")]),
    ("Read", "Reads a file from the local filesystem, with line numbers.",
     [("file_path", "string"), ("offset", "number"), ("limit", "number")]),
    ("Edit", "Replaces an exact string in a file with another.",
     [("file_path", "string"), ("old_string", "string"), ("new_string", "string"), ("replace_all", "boolean")]),
    ("Write", "Writes a whole file to the local filesystem.", [("file_path", "string"), ("content", "string")]),
    ("Glob", "Finds files by glob pattern, newest first.", [("pattern", "string"), ("path", "string")]),
    ("Grep", "Searches file contents with a regular expression.",
     [("pattern", "string"), ("path", "string"), ("glob", "string"), ("output_mode", "string")]),
    ("TodoWrite", "Keeps the session's task list.", [("todos", "array")]),
    ("WebFetch", "Fetches a URL and answers a prompt about its content.", [("url", "string"), ("prompt", "string")]),
]

SOURCE = "\n".join(
    f"{n:>6}\tfn step_{n}(input: &[u8]) -> Result<usize, Error> {{ parse(input).map(|v| v.len() + {n}) }}"
    for n in range(1, 9)
)


def messages_body(model):
    tools = []
    for name, text, fields in TOOLS:
        tools.append({"name": name, "description": text + " " + text.lower() * 3,
                      "input_schema": schema(*fields)})
    system = [
        {"type": "text", "text": "You are an interactive command line tool that helps users with software "
                                 "engineering tasks. " * 12},
        {"type": "text", "text": "Follow the repository's conventions; run its tests before you finish. " * 20,
         "cache_control": {"type": "ephemeral"}},
    ]
    messages = [{"role": "user", "content": [{"type": "text", "text": "Fix the failing parser test and explain."}]}]
    turn = 0
    while len(json.dumps({"messages": messages, "tools": tools, "system": system})) < 36_000:
        turn += 1
        call = f"toolu_bench_{turn:04d}"
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Reading the parser, step {turn}."},
            {"type": "tool_use", "id": call, "name": "Read",
             "input": {"file_path": f"/repo/src/parser/step_{turn}.rs", "offset": 1, "limit": 200}},
        ]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call, "content": SOURCE},
        ]})
    messages[-1]["content"].append({"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral"}})
    return {"model": model, "max_tokens": 32000, "stream": True, "system": system, "tools": tools,
            "messages": messages, "metadata": {"user_id": "bench-session"}}


def responses_body(model):
    tools = [{"type": "function", "name": name.lower(), "description": text, "strict": False,
              "parameters": schema(*fields)} for name, text, fields in TOOLS[:5]]
    items = [{"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "Make the parser accept trailing commas."}]}]
    turn = 0
    while len(json.dumps({"input": items, "tools": tools})) < 17_000:
        turn += 1
        call = f"call_bench_{turn:04d}"
        items.append({"type": "function_call", "call_id": call, "name": "bash",
                      "arguments": json.dumps({"command": f"sed -n 1,40p src/parser/step_{turn}.rs"})})
        items.append({"type": "function_call_output", "call_id": call, "output": SOURCE})
    return {"model": model, "stream": True, "store": False, "parallel_tool_calls": False,
            "instructions": "You are a coding agent running in a terminal. Keep changes small. " * 30,
            "tools": tools, "tool_choice": "auto", "input": items}


def sse(events):
    return "".join(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n" for name, data in events)


def messages_stream():
    deltas = EVENTS - 5
    events = [("message_start", {"type": "message_start", "message": {
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench-agent", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 9000, "cache_read_input_tokens": 0, "output_tokens": 1}}})]
    events.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}))
    events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": word(i)}}) for i in range(deltas)]
    events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                     "usage": {"output_tokens": deltas}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return sse(events)


def chat_stream():
    def chunk(delta, finish=None, usage=None):
        body = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "bench-agent-chat",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else []}
        if usage is not None:
            body["usage"] = usage
        return "data: " + json.dumps(body, separators=(",", ":")) + "\n\n"

    deltas = EVENTS - 4
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": word(i)}) for i in range(deltas)]
    out.append(chunk({}, "stop"))
    out.append(chunk({}, usage={"prompt_tokens": 9000, "completion_tokens": deltas, "total_tokens": 9000 + deltas}))
    out.append("data: [DONE]\n\n")
    return "".join(out)


def responses_stream():
    deltas = EVENTS - 8
    text = "".join(word(i) for i in range(deltas))
    item = {"id": "msg_bench", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    response = {"id": "resp_bench", "object": "response", "created_at": 1, "status": "in_progress",
                "model": "bench-codex", "output": [], "usage": None}
    done_item = dict(item, status="completed", content=[dict(part, text=text)])
    completed = dict(response, status="completed", output=[done_item],
                     usage={"input_tokens": 5000, "input_tokens_details": {"cached_tokens": 0},
                            "output_tokens": deltas, "output_tokens_details": {"reasoning_tokens": 0},
                            "total_tokens": 5000 + deltas})
    events = [("response.created", {"type": "response.created", "sequence_number": 0, "response": response}),
              ("response.in_progress", {"type": "response.in_progress", "sequence_number": 1,
                                        "response": response}),
              ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 2,
                                              "output_index": 0, "item": item}),
              ("response.content_part.added", {"type": "response.content_part.added", "sequence_number": 3,
                                               "item_id": "msg_bench", "output_index": 0, "content_index": 0,
                                               "part": part})]
    events += [("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 4 + i,
                                               "item_id": "msg_bench", "output_index": 0, "content_index": 0,
                                               "delta": word(i)}) for i in range(deltas)]
    seq = 4 + deltas
    events += [("response.output_text.done", {"type": "response.output_text.done", "sequence_number": seq,
                                              "item_id": "msg_bench", "output_index": 0, "content_index": 0,
                                              "text": text}),
               ("response.content_part.done", {"type": "response.content_part.done", "sequence_number": seq + 1,
                                               "item_id": "msg_bench", "output_index": 0, "content_index": 0,
                                               "part": dict(part, text=text)}),
               ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": seq + 2,
                                              "output_index": 0, "item": done_item}),
               ("response.completed", {"type": "response.completed", "sequence_number": seq + 3,
                                       "response": completed})]
    return sse(events)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main():
    out = sys.argv[1]
    write(f"{out}/messages.json", json.dumps(messages_body("bench-agent")))
    write(f"{out}/messages-chat.json", json.dumps(messages_body("bench-agent-chat")))
    write(f"{out}/responses.json", json.dumps(responses_body("bench-codex")))
    write(f"{out}/upstream/anthropic/v1/messages", messages_stream())
    write(f"{out}/upstream/chat/v1/chat/completions", chat_stream())
    write(f"{out}/upstream/codex/v1/responses", responses_stream())


if __name__ == "__main__":
    main()
