"""Drives the gateway with the official OpenAI Python SDK the way an
application on an Azure OpenAI channel does: one chat completion, one
streamed with usage, and a function-calling round (the tool call plain and
streamed, then the tool's result sent back). Prints a JSON summary."""

import json
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
model = os.environ["GW_MODEL"]
question = [{"role": "user", "content": "What is the weather in Paris?"}]
tools = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather at a location",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    },
}]


def usage_of(usage):
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_tokens": usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else None,
    }


reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello"}])

streamed, streamed_usage = "", None
for chunk in client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say hello"}],
    stream=True,
    stream_options={"include_usage": True},
):
    if chunk.choices:
        streamed += chunk.choices[0].delta.content or ""
    if chunk.usage:
        streamed_usage = usage_of(chunk.usage)

called = client.chat.completions.create(model=model, messages=question, tools=tools)
call = called.choices[0].message.tool_calls[0]

streamed_name, streamed_arguments, streamed_finish = None, "", None
for chunk in client.chat.completions.create(model=model, messages=question, tools=tools, stream=True):
    if not chunk.choices:
        continue
    for piece in chunk.choices[0].delta.tool_calls or []:
        streamed_name = piece.function.name or streamed_name
        streamed_arguments += piece.function.arguments or ""
    streamed_finish = chunk.choices[0].finish_reason or streamed_finish

answered = client.chat.completions.create(
    model=model,
    tools=tools,
    messages=question + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees"},
    ],
)

print(json.dumps({
    "text": reply.choices[0].message.content,
    "model": reply.model,
    "usage": usage_of(reply.usage),
    "streamed": streamed,
    "streamed_usage": streamed_usage,
    "tool_call": {
        "finish_reason": called.choices[0].finish_reason,
        "name": call.function.name,
        "arguments": json.loads(call.function.arguments),
    },
    "streamed_tool_call": {
        "finish_reason": streamed_finish,
        "name": streamed_name,
        "arguments": json.loads(streamed_arguments) if streamed_arguments else None,
    },
    "after_tool": answered.choices[0].message.content,
}))
