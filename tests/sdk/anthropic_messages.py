"""Drives the gateway's chat endpoints with the official SDKs and prints what
came back as JSON, for tests/tests/suite/messages.rs.

Usage: anthropic_messages.py CASE, one of
  chat          Anthropic SDK: messages.create, then messages.stream
  beta          Anthropic SDK: beta.messages.create with a beta flag and ?beta=true
  tools         Anthropic SDK: a tool_use answer, then the tool_result turn
  tool-result   Anthropic SDK: a conversation ending in a tool_result
  errors        Anthropic SDK: no max_tokens, no version header (each a 400)
  quota         Anthropic SDK: one call that the gateway refuses with 403
  openai        OpenAI SDK: chat.completions.create plain and streamed
Environment: GW_HOST (http://host:port), GW_API_KEY, GW_MODEL.
Every request the SDK sends is counted ("requests"), so retries show.
"""

import json
import os
import sys

case = sys.argv[1]
host = os.environ["GW_HOST"]
key = os.environ["GW_API_KEY"]
model = os.environ.get("GW_MODEL", "gpt-4o")
sent = []
versions = []
result = {}


def count(request):
    sent.append(str(request.url))
    versions.append(request.headers.get("anthropic-version"))


def usage(u):
    return {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens}


if case == "openai":
    import openai

    client = openai.OpenAI(
        base_url=f"{host}/v1",
        api_key=key,
        max_retries=0,
        http_client=openai.DefaultHttpxClient(event_hooks={"request": [count]}),
    )
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    reply = client.chat.completions.create(model=model, messages=messages, max_tokens=64)
    result["text"] = reply.choices[0].message.content
    result["finish_reason"] = reply.choices[0].finish_reason
    result["usage"] = {"prompt_tokens": reply.usage.prompt_tokens, "completion_tokens": reply.usage.completion_tokens}
    streamed, stream_usage, finish = "", None, None
    stream = client.chat.completions.create(
        model=model, messages=messages, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        if chunk.usage is not None:
            stream_usage = {"prompt_tokens": chunk.usage.prompt_tokens, "completion_tokens": chunk.usage.completion_tokens}
        if chunk.choices:
            streamed += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    result.update(streamed=streamed, stream_usage=stream_usage, stream_finish_reason=finish)
    result["requests"] = len(sent)
    print(json.dumps(result))
    sys.exit(0)

import anthropic

http_client = anthropic.DefaultHttpxClient(event_hooks={"request": [count]})
client = anthropic.Anthropic(
    base_url=host,
    api_key=key,
    max_retries=2,
    http_client=http_client,
    default_headers={"anthropic-beta": "test-beta-2025-01-01", "x-vendor-trace": "trace-42"},
)
hello = [{"role": "user", "content": "Say hello"}]
weather = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
try:
    if case == "chat":
        message = client.messages.create(model=model, max_tokens=64, system="Be brief.", messages=hello)
        result["type"] = message.type
        result["text"] = "".join(b.text for b in message.content if b.type == "text")
        result["stop_reason"] = message.stop_reason
        result["usage"] = usage(message.usage)
        with client.messages.stream(model=model, max_tokens=64, messages=hello) as stream:
            result["streamed"] = "".join(stream.text_stream)
            final = stream.get_final_message()
        result["stream_usage"] = usage(final.usage)
        result["stream_stop_reason"] = final.stop_reason
    elif case == "beta":
        # This SDK release's beta client sends no ?beta=true of its own; other
        # clients (coding agents) do, so the case adds it the way they send it.
        message = client.beta.messages.create(
            model=model, max_tokens=64, messages=hello, betas=["extra-beta-1"], extra_query={"beta": "true"}
        )
        result["urls"] = list(sent)
        result["text"] = "".join(b.text for b in message.content if b.type == "text")
    elif case == "tools":
        message = client.messages.create(model=model, max_tokens=64, messages=hello, tools=[weather])
        tool = next(b for b in message.content if b.type == "tool_use")
        result["block_class"] = type(tool).__name__
        result["tool"] = {"id": tool.id, "name": tool.name, "input": tool.input}
        result["stop_reason"] = message.stop_reason
        follow_up = hello + [
            {"role": "assistant", "content": message.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "sunny"}]},
        ]
        with client.messages.stream(model=model, max_tokens=64, messages=follow_up, tools=[weather]) as stream:
            final = stream.get_final_message()
        result["second_blocks"] = [b.type for b in final.content]
    elif case == "tool-result":
        turns = hello + [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
        ]
        message = client.messages.create(model=model, max_tokens=64, messages=turns, tools=[weather])
        result["text"] = "".join(b.text for b in message.content if b.type == "text")
    elif case == "errors":
        outcomes = []
        for label, call in [
            ("no-max-tokens", lambda: client.post("/v1/messages", cast_to=object, body={"model": model, "messages": hello})),
            (
                "no-version",
                lambda: client.messages.create(
                    model=model, max_tokens=8, messages=hello, extra_headers={"anthropic-version": anthropic.Omit()}
                ),
            ),
        ]:
            try:
                call()
                outcomes.append({"case": label, "outcome": "ok"})
            except anthropic.APIStatusError as error:
                outcomes.append(
                    {
                        "case": label,
                        "outcome": type(error).__name__,
                        "status": error.status_code,
                        "body": error.body,
                        "should_retry": error.response.headers.get("x-should-retry"),
                    }
                )
        result["outcomes"] = outcomes
    elif case == "quota":
        client.messages.create(model=model, max_tokens=8, messages=hello)
        result["outcome"] = "ok"
except anthropic.APIStatusError as error:
    result.update(outcome=type(error).__name__, status=error.status_code, body=error.body)
result["requests"] = len(sent)
result["urls"] = sent
result["versions"] = versions
print(json.dumps(result))
