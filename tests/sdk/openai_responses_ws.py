"""Drives /v1/responses over a WebSocket with the official OpenAI Python SDK
(`client.responses.connect()`), the way an agent loop does: on one socket a
first response, a second that continues it by `previous_response_id` (sending
only its new input), one for a model the gateway does not know (an `error`
event), and one more, in a lane (`stream_id`), to show the socket is still
usable. With the argument `leave`, sends one response.create and closes the
socket without reading. With `cut`, closes the socket after the second text
delta of a response. With `revoke <asked> <revoked>`, answers one response,
writes the file `asked` and waits for the file `revoked` before asking again,
then reads until the gateway closes the socket. Prints a JSON summary of what
each response sent back."""

import json
import os
import sys
import time

from openai import OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
model = os.environ["GW_MODEL"]


def collect(connection):
    """Reads one response's events: until it completes, fails or errors."""
    events, text, completed, error, lanes = [], "", None, None, set()
    while True:
        event = connection.recv()
        events.append(event.type)
        lanes.add(getattr(event, "stream_id", None))
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
    summary = {"events": events, "text": text, "error": error, "lanes": sorted(lane or "" for lane in lanes)}
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

if sys.argv[1:] == ["cut"]:
    deltas = 0
    with client.responses.connect() as connection:
        connection.response.create(model=model, input="Count slowly")
        while deltas < 2:
            if connection.recv().type == "response.output_text.delta":
                deltas += 1
    print(json.dumps({"deltas": deltas}))
    sys.exit(0)

if sys.argv[1:2] == ["revoke"]:
    asked, revoked = sys.argv[2], sys.argv[3]
    with client.responses.connect() as connection:
        connection.response.create(model=model, input="Say hello")
        first = collect(connection)
        with open(asked, "w") as f:
            f.write(first.get("id", ""))
        deadline = time.monotonic() + 60
        while not os.path.exists(revoked) and time.monotonic() < deadline:
            time.sleep(0.05)
        connection.response.create(model=model, input="Say hello again")
        second = collect(connection)
        try:
            connection.recv()
            closed = None
        except Exception as closed_by:
            frame = getattr(closed_by, "rcvd", None)
            closed = {"kind": type(closed_by).__name__, "code": getattr(frame, "code", None)}
    print(json.dumps({"first": first, "second": second, "closed": closed}))
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
