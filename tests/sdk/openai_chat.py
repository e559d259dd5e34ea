"""Drives the gateway with the official OpenAI Python SDK: the model
retrieved and a missing one refused, one chat completion and one streamed
chat completion. Prints a JSON summary."""

import json
import os

from openai import NotFoundError, OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
model = os.environ["GW_MODEL"]
messages = [{"role": "user", "content": "Say hello"}]

retrieved = client.models.retrieve(model)
try:
    client.models.retrieve("no-such-model")
    missing = None
except NotFoundError as error:
    missing = error.status_code

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
    "retrieved": {"id": retrieved.id, "object": retrieved.object, "owned_by": retrieved.owned_by},
    "missing": missing,
}))
