"""Drives the gateway's Gemini dialect with the official google-genai Python
SDK, pointed at the gateway (base URL without a version) with a gateway
token as its API key. The SDK's own API version (`v1` in 3.x) unless
GW_GENAI_API_VERSION names another (`v1beta`, as Gemini CLI uses). The first
argument picks what to do; each prints one JSON summary:

  basic    generate_content with thoughts asked for, generate_content_stream,
           count_tokens and models.list
  call     generate_content declaring one function (never run by the SDK)
  answer   the function's result sent back after the model turn given as
           the second argument (JSON, as `call` printed it)
  refused  generate_content expected to be refused: status and message
"""

import json
import os
import sys

from google import genai
from google.genai import errors, types

http_options = types.HttpOptions(base_url=os.environ["GW_BASE_URL"], retry_options=types.HttpRetryOptions(attempts=1))
if os.environ.get("GW_GENAI_API_VERSION"):
    http_options.api_version = os.environ["GW_GENAI_API_VERSION"]
client = genai.Client(api_key=os.environ["GW_API_KEY"], http_options=http_options)
model = os.environ["GW_MODEL"]
mode = sys.argv[1]

weather = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather",
    description="The current weather at a location",
    parameters_json_schema={
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
)])
with_tools = types.GenerateContentConfig(
    tools=[weather],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
)
question = types.Content(role="user", parts=[types.Part(text="What is the weather in Paris?")])


def usage_of(usage):
    if usage is None:
        return None
    return {
        "prompt": usage.prompt_token_count,
        "cached": usage.cached_content_token_count,
        "candidates": usage.candidates_token_count,
        "thoughts": usage.thoughts_token_count,
        "total": usage.total_token_count,
    }


def text_of(response):
    parts = response.candidates[0].content.parts or [] if response.candidates else []
    return "".join(p.text or "" for p in parts if not p.thought)


def thoughts_of(response):
    parts = response.candidates[0].content.parts or [] if response.candidates else []
    return "".join(p.text or "" for p in parts if p.thought)


if mode == "basic":
    reply = client.models.generate_content(
        model=model,
        contents="Say hello",
        config=types.GenerateContentConfig(
            system_instruction="You are terse.",
            thinking_config=types.ThinkingConfig(include_thoughts=True),
        ),
    )
    streamed, streamed_usage, chunks = "", None, 0
    for chunk in client.models.generate_content_stream(model=model, contents="Say hello"):
        chunks += 1
        streamed += text_of(chunk)
        streamed_usage = usage_of(chunk.usage_metadata) or streamed_usage
    counted = client.models.count_tokens(model=model, contents="Say hello")
    listed = [m.name for m in client.models.list()]
    print(json.dumps({
        "text": text_of(reply),
        "thoughts": thoughts_of(reply),
        "finish_reason": str(reply.candidates[0].finish_reason.value) if reply.candidates[0].finish_reason else None,
        "usage": usage_of(reply.usage_metadata),
        "streamed": streamed,
        "chunks": chunks,
        "streamed_usage": streamed_usage,
        "counted": counted.total_tokens,
        "models": listed,
    }))
elif mode == "call":
    called = client.models.generate_content(model=model, contents=[question], config=with_tools)
    calls = called.function_calls or []
    print(json.dumps({
        "calls": [{"name": c.name, "args": c.args} for c in calls],
        "turn": called.candidates[0].content.model_dump(mode="json", exclude_none=True),
        "usage": usage_of(called.usage_metadata),
    }))
elif mode == "answer":
    turn = types.Content.model_validate(json.loads(sys.argv[2]))
    call = next(p.function_call for p in turn.parts if p.function_call)
    result = types.Part.from_function_response(name=call.name, response={"forecast": "Sunny, 21 degrees"})
    if call.id:
        result.function_response.id = call.id
    answered = client.models.generate_content(
        model=model,
        contents=[question, turn, types.Content(role="user", parts=[result])],
        config=with_tools,
    )
    print(json.dumps({"text": text_of(answered), "usage": usage_of(answered.usage_metadata)}))
elif mode == "refused":
    try:
        client.models.generate_content(model=model, contents="Say hello")
        print(json.dumps({"refused": False}))
    except errors.APIError as error:
        print(json.dumps({"refused": True, "code": error.code, "status": error.status, "message": error.message}))
else:
    sys.exit(f"unknown mode {mode!r}")
