"""Drives a rate-limited token with the official OpenAI Python SDK until the
gateway refuses it, without SDK retries. Prints a JSON summary of the
requests admitted and the RateLimitError raised."""

import json
import os

import openai
from openai import OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
attempts = int(os.environ["GW_ATTEMPTS"])
messages = [{"role": "user", "content": "Say hello"}]

admitted = 0
refusal = None
for _ in range(attempts):
    try:
        client.chat.completions.create(model=os.environ["GW_MODEL"], messages=messages)
        admitted += 1
    except openai.RateLimitError as error:
        refusal = {
            "class": type(error).__name__,
            "status": error.status_code,
            "code": error.code,
            "type": error.type,
            "message": error.body.get("message") if isinstance(error.body, dict) else None,
            "retry_after": error.response.headers.get("retry-after"),
            "request_id": error.response.headers.get("x-request-id"),
        }
        break

print(json.dumps({"admitted": admitted, "refusal": refusal}))
