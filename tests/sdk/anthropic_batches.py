"""Drives the gateway's message batches with the official Anthropic Python
SDK. The first argument says what to do:

- create: messages.batches.create with GW_LINES requests to GW_MODEL;
- retrieve: messages.batches.retrieve(GW_BATCH), messages.batches.list, and
  once it ended, messages.batches.results (fetched from its results_url);
- cancel: messages.batches.cancel(GW_BATCH).

Prints a JSON summary; an SDK error on create prints its status and body."""

import json
import os
import sys

import anthropic

client = anthropic.Anthropic(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
action = sys.argv[1]

if action == "create":
    requests = [
        {
            "custom_id": f"req-{i}",
            "params": {
                "model": os.environ["GW_MODEL"],
                "max_tokens": int(os.environ.get("GW_MAX_TOKENS", "1000")),
                "messages": [{"role": "user", "content": f"say ok {i}"}],
            },
        }
        for i in range(int(os.environ.get("GW_LINES", "3")))
    ]
    try:
        batch = client.messages.batches.create(requests=requests)
    except anthropic.APIStatusError as error:
        print(json.dumps({"error": {"status": error.status_code, "body": error.body}}))
        raise SystemExit(0)
    print(json.dumps({"batch": batch.to_dict(mode="json")}))
elif action == "retrieve":
    batch = client.messages.batches.retrieve(os.environ["GW_BATCH"])
    summary = {
        "batch": batch.to_dict(mode="json"),
        "batches": [b.id for b in client.messages.batches.list(limit=100).data],
    }
    if batch.processing_status == "ended":
        summary["results"] = [r.to_dict(mode="json") for r in client.messages.batches.results(batch.id)]
    print(json.dumps(summary))
elif action == "cancel":
    print(json.dumps({"batch": client.messages.batches.cancel(os.environ["GW_BATCH"]).to_dict(mode="json")}))
else:
    raise SystemExit(f"unknown action {action}")
