"""Drives the gateway with the official OpenAI Python SDK: one chat
completion and one streamed chat completion. Prints a JSON summary."""

import json
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
model = os.environ["GW_MODEL"]
messages = [{"role": "user", "content": "Say hello"}]

reply = client.chat.completions.create(model=model, messages=messages)
streamed = "".join(
    chunk.choices[0].delta.content or ""
    for chunk in client.chat.completions.create(model=model, messages=messages, stream=True)
    if chunk.choices
)
print(json.dumps({
    "text": reply.choices[0].message.content,
    "prompt_tokens": reply.usage.prompt_tokens,
    "streamed": streamed,
}))
