"""Drives the gateway's /v1/responses with the official OpenAI Python SDK
the way an application does: a plain answer, a streamed one (raw events),
a function call plain and through the SDK's stream helper (which checks
the events' order as it assembles them), the tool's result sent back as
input items, and an input-token count. Prints a JSON summary."""

import json
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
model = os.environ["GW_MODEL"]
tools = [{
    "type": "function",
    "name": "get_weather",
    "description": "The current weather at a location",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
}]
question = "What is the weather in Paris?"


def usage_of(usage):
    return {
        "input_tokens": usage.input_tokens,
        "cached_tokens": usage.input_tokens_details.cached_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_tokens": usage.output_tokens_details.reasoning_tokens,
        "total_tokens": usage.total_tokens,
    }


def calls_of(response):
    return [
        {"name": item.name, "call_id": item.call_id, "arguments": json.loads(item.arguments)}
        for item in response.output
        if item.type == "function_call"
    ]


plain = client.responses.create(
    model=model, instructions="Be brief.", input="Say hello", max_output_tokens=64
)

events, text, completed = [], "", None
for event in client.responses.create(model=model, input="Say hello", stream=True):
    events.append({"type": event.type, "sequence_number": event.sequence_number})
    if event.type == "response.output_text.delta":
        text += event.delta
    if event.type == "response.completed":
        completed = event.response

called = client.responses.create(model=model, input=question, tools=tools, tool_choice="auto")

with client.responses.stream(model=model, input=question, tools=tools) as stream:
    argument_deltas = sum(1 for event in stream if event.type == "response.function_call_arguments.delta")
    streamed_call = stream.get_final_response()

call = calls_of(called)[0]
answered = client.responses.create(
    model=model,
    tools=tools,
    input=[
        {"role": "user", "content": question},
        {"type": "function_call", "call_id": call["call_id"], "name": call["name"], "arguments": json.dumps(call["arguments"])},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny, 21 degrees"},
    ],
)

counted = client.responses.input_tokens.count(model=model, input=question, tools=tools)

print(json.dumps({
    "plain": {
        "object": plain.object,
        "status": plain.status,
        "text": plain.output_text,
        "model": plain.model,
        "usage": usage_of(plain.usage),
    },
    "streamed": {
        "events": events,
        "text": text,
        "output_text": completed.output_text if completed else None,
        "usage": usage_of(completed.usage) if completed else None,
    },
    "tool_call": {"status": called.status, "calls": calls_of(called), "text": called.output_text},
    "streamed_tool_call": {"calls": calls_of(streamed_call), "argument_deltas": argument_deltas},
    "after_tool": {"calls": calls_of(answered), "text": answered.output_text},
    "input_tokens": {"object": counted.object, "input_tokens": counted.input_tokens},
}))
