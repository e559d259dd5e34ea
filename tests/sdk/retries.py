"""Sends one request through the gateway with an official SDK that is allowed
to retry, and prints what happened as JSON: "ok" or the exception class, the
HTTP status, the error body, and how many HTTP requests the SDK sent (so a
test can tell whether the SDK retried).

Usage: retries.py CASE, one of
  openai-chat, openai-stream        chat completion (plain / streamed)
  anthropic-unknown-messages-path   POST /v1/messages/<nothing>: a 404 in the messages shape
  anthropic-models-api-key          GET /v1/models with the key in x-api-key
  anthropic-models-bearer           GET /v1/models with Authorization: Bearer
  anthropic-messages                POST /v1/messages (messages.create)
Environment: GW_HOST (http://host:port), GW_API_KEY, GW_MODEL,
GW_MAX_RETRIES (default 2).
"""

import json
import os
import sys

case = sys.argv[1]
host = os.environ["GW_HOST"]
key = os.environ["GW_API_KEY"]
model = os.environ.get("GW_MODEL", "gpt-4o")
max_retries = int(os.environ.get("GW_MAX_RETRIES", "2"))
sent = []


def count(request):
    sent.append(request.url.path)


# Only the SDK a case needs is imported: each takes seconds to load.
if case.startswith("openai-"):
    import openai as sdk
else:
    import anthropic as sdk

result = {"outcome": "ok"}
try:
    if case.startswith("openai-"):
        openai = sdk
        client = openai.OpenAI(
            base_url=f"{host}/v1",
            api_key=key,
            max_retries=max_retries,
            http_client=openai.DefaultHttpx2Client(event_hooks={"request": [count]}),
        )
        messages = [{"role": "user", "content": "hi"}]
        if case == "openai-chat":
            reply = client.chat.completions.create(model=model, messages=messages)
            result["text"] = reply.choices[0].message.content
        else:
            stream = client.chat.completions.create(model=model, messages=messages, stream=True)
            result["text"] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    else:
        anthropic = sdk
        http_client = anthropic.DefaultHttpxClient(event_hooks={"request": [count]})
        if case == "anthropic-models-bearer":
            client = anthropic.Anthropic(base_url=host, auth_token=key, max_retries=max_retries, http_client=http_client)
        else:
            client = anthropic.Anthropic(base_url=host, api_key=key, max_retries=max_retries, http_client=http_client)
        if case == "anthropic-messages":
            reply = client.messages.create(
                model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
            )
            result["text"] = "".join(block.text for block in reply.content if block.type == "text")
        elif case == "anthropic-unknown-messages-path":
            client.post("/v1/messages/no-such-endpoint", cast_to=object, body={"model": model})
        else:
            client.models.list()
except sdk.APIStatusError as error:
    result = {
        "outcome": type(error).__name__,
        "status": error.status_code,
        "body": error.body,
        "should_retry": error.response.headers.get("x-should-retry"),
        "request_id": error.response.headers.get("x-request-id"),
    }
result["requests"] = len(sent)
print(json.dumps(result))
