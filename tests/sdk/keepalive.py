"""Streams through the gateway's keepalives with the official SDKs and prints
what came back as JSON, for tests/tests/suite/keepalive.rs.

Usage: keepalive.py CASE, one of
  openai            OpenAI SDK: a streamed chat completion with usage
  openai-error      OpenAI SDK: a streamed chat completion that fails
  openai-responses  OpenAI SDK: a streamed response, its text and usage
  anthropic         Anthropic SDK: messages.stream, its text and final usage
  anthropic-error   Anthropic SDK: messages.stream that fails
Environment: GW_HOST (http://host:port), GW_API_KEY, GW_MODEL.
"""

import json
import os
import sys

case = sys.argv[1]
host = os.environ["GW_HOST"]
key = os.environ["GW_API_KEY"]
model = os.environ.get("GW_MODEL", "gpt-4o")
hello = [{"role": "user", "content": "Say hello"}]
result = {}

if case == "openai-responses":
    import openai

    client = openai.OpenAI(base_url=f"{host}/v1", api_key=key, max_retries=0)
    text, usage = "", None
    for event in client.responses.create(model=model, input="Say hello", stream=True):
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "response.completed":
            usage = {"input_tokens": event.response.usage.input_tokens, "output_tokens": event.response.usage.output_tokens}
    result.update(text=text, usage=usage)
elif case.startswith("openai"):
    import openai

    client = openai.OpenAI(base_url=f"{host}/v1", api_key=key, max_retries=0)
    text, usage = "", None
    try:
        stream = client.chat.completions.create(
            model=model, messages=hello, stream=True, stream_options={"include_usage": True}
        )
        for chunk in stream:
            if chunk.usage is not None:
                usage = {"prompt_tokens": chunk.usage.prompt_tokens, "completion_tokens": chunk.usage.completion_tokens}
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
    except openai.APIError as error:
        result["error"] = {"class": type(error).__name__, "message": error.message}
    result.update(text=text, usage=usage)
else:
    import anthropic

    client = anthropic.Anthropic(base_url=host, api_key=key, max_retries=0)
    try:
        with client.messages.stream(model=model, max_tokens=64, messages=hello) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        result.update(
            text=text,
            usage={"input_tokens": final.usage.input_tokens, "output_tokens": final.usage.output_tokens},
        )
    except anthropic.APIStatusError as error:
        body = error.body if isinstance(error.body, dict) else {}
        result["error"] = {"class": type(error).__name__, "type": body.get("error", {}).get("type")}
        result["error"]["message"] = body.get("error", {}).get("message")

print(json.dumps(result))
