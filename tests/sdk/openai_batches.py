"""Drives the gateway's files and batches with the official OpenAI Python
SDK. The first argument says what to do:

- create: uploads a JSONL of GW_LINES chat requests to GW_MODEL (each with
  max_tokens GW_MAX_TOKENS) with files.create, then batches.create over it;
- retrieve: batches.retrieve(GW_BATCH), batches.list, files.list, and when
  the batch has an output file, files.content of it;
- cancel: batches.cancel(GW_BATCH);
- foreign: batches.retrieve(GW_BATCH), files.retrieve(GW_FILE) and
  files.content(GW_FILE), expecting each to fail; their statuses.

Prints a JSON summary; an SDK error on create prints its status and body."""

import json
import os
import sys

import openai
from openai import OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
action = sys.argv[1]


def failure(error):
    return {"status": error.status_code, "body": error.body}


if action == "create":
    lines = [
        json.dumps({
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": os.environ["GW_MODEL"],
                "max_tokens": int(os.environ.get("GW_MAX_TOKENS", "1000")),
                "messages": [{"role": "user", "content": f"say ok {i}"}],
            },
        })
        for i in range(int(os.environ.get("GW_LINES", "3")))
    ]
    try:
        uploaded = client.files.create(file=("requests.jsonl", "\n".join(lines).encode()), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    except openai.APIStatusError as error:
        print(json.dumps({"error": failure(error)}))
        raise SystemExit(0)
    print(json.dumps({"file": uploaded.to_dict(), "batch": batch.to_dict()}))
elif action == "retrieve":
    batch = client.batches.retrieve(os.environ["GW_BATCH"])
    summary = {
        "batch": batch.to_dict(),
        "batches": [b.id for b in client.batches.list(limit=100).data],
        "files": [f.id for f in client.files.list().data],
        "uploads": [f.id for f in client.files.list(purpose="batch").data],
        "outputs": [f.id for f in client.files.list(purpose="batch_output").data],
        "fine_tune": [f.id for f in client.files.list(purpose="fine-tune").data],
    }
    if batch.output_file_id:
        summary["output_file"] = client.files.retrieve(batch.output_file_id).to_dict()
        summary["output"] = client.files.content(batch.output_file_id).text
    print(json.dumps(summary))
elif action == "cancel":
    print(json.dumps({"batch": client.batches.cancel(os.environ["GW_BATCH"]).to_dict()}))
elif action == "foreign":
    statuses = {}
    for name, call in [
        ("batch", lambda: client.batches.retrieve(os.environ["GW_BATCH"])),
        ("cancel", lambda: client.batches.cancel(os.environ["GW_BATCH"])),
        ("file", lambda: client.files.retrieve(os.environ["GW_FILE"])),
        ("content", lambda: client.files.content(os.environ["GW_FILE"])),
        ("delete", lambda: client.files.delete(os.environ["GW_FILE"])),
    ]:
        try:
            call()
            statuses[name] = 200
        except openai.APIStatusError as error:
            statuses[name] = error.status_code
    statuses["listed"] = [b.id for b in client.batches.list().data] + [f.id for f in client.files.list().data]
    print(json.dumps(statuses))
else:
    raise SystemExit(f"unknown action {action}")
