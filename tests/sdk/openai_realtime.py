"""Drives the gateway's /v1/realtime with the official OpenAI Python SDK's
realtime client: one session, GW_RESPONSES responses (each a
conversation.item.create and a response.create, read to its
response.done). Prints the session's id and, per response, its delta count,
transcript and usage as JSON."""

import json
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
responses = []
with client.realtime.connect(model=os.environ["GW_MODEL"]) as connection:
    created = connection.recv()
    assert created.type == "session.created", created.type
    for n in range(int(os.environ.get("GW_RESPONSES", "2"))):
        connection.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"say hello {n}"}],
            }
        )
        connection.response.create()
        deltas, transcript = 0, ""
        for event in connection:
            if event.type.endswith(".delta"):
                deltas += 1
                transcript += getattr(event, "delta", "") if "transcript" in event.type else ""
            if event.type == "response.done":
                responses.append(
                    {
                        "deltas": deltas,
                        "transcript": transcript,
                        "usage": event.response.usage.to_dict() if event.response.usage else None,
                    }
                )
                break
            if event.type == "error":
                raise SystemExit(f"error event: {event.to_json()}")

print(json.dumps({"session": created.session.to_dict() if created.session else None, "responses": responses}))
