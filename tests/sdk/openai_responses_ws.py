"""Drives /v1/responses over a WebSocket with the official OpenAI Python SDK
(`client.responses.connect()`), the way an agent loop does: on one socket a
first response, a second that continues it by `previous_response_id` (sending
only its new input), one for a model the gateway does not know (an `error`
event), and one more to show the socket is still usable. With the argument
`leave`, sends one response.create and closes the socket without reading.
Prints a JSON summary of what each response sent back."""

import json
import os
import sys

from openai import OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
model = os.environ["GW_MODEL"]


def collect(connection):
    """Reads one response's events: until it completes, fails or errors."""
    events, text, completed, error = [], "", None, None
    while True:
        event = connection.recv()
        events.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type == "response.completed":
            completed = event.response
            break
        if event.type in ("response.failed", "response.incomplete"):
            break
        if event.type == "error":
            error = {
                "status": event.status,
                "code": event.error.code,
                "type": event.error.type,
                "message": event.error.message,
                "headers": event.error.headers,
            }
            break
    summary = {"events": events, "text": text, "error": error}
    if completed is not None:
        summary["id"] = completed.id
        summary["status"] = completed.status
        summary["usage"] = {
            "input_tokens": completed.usage.input_tokens,
            "output_tokens": completed.usage.output_tokens,
        }
    return summary


if sys.argv[1:] == ["leave"]:
    with client.responses.connect() as connection:
        connection.response.create(model=model, input="Say hello", store=False)
    print(json.dumps({"left": True}))
    sys.exit(0)

with client.responses.connect() as connection:
    connection.response.create(model=model, instructions="Be brief.", input="Say hello", store=False)
    first = collect(connection)
    connection.response.create(
        model=model,
        instructions="Be brief.",
        previous_response_id=first.get("id"),
        input=[{"type": "message", "role": "user", "content": "Once more, please"}],
        store=False,
    )
    second = collect(connection)
    connection.response.create(model="no-such-model", input="Say hello")
    unknown = collect(connection)
    connection.response.create(model=model, input="Still there?", stream_id="lane-7")
    after = collect(connection)

print(json.dumps({"first": first, "second": second, "unknown": unknown, "after": after}))
