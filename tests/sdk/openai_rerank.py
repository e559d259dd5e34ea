"""Calls the gateway's /v1/rerank through the official OpenAI Python SDK's
own request method (the SDK has no rerank resource; retrieval code that
reuses its client for rerank calls it this way): one rerank, then one
without a query, whose 400 the SDK must raise as BadRequestError. Prints a
JSON summary."""

import json
import os

import openai
from openai import OpenAI

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
model = os.environ["GW_MODEL"]

answer = client.post(
    "/rerank",
    cast_to=object,
    body={
        "model": model,
        "query": "rust gateway",
        "documents": ["a rust gateway", {"text": "a python web app"}, "the gateway in rust is fast"],
        "top_n": 2,
        "return_documents": True,
    },
)

try:
    client.post("/rerank", cast_to=object, body={"model": model, "documents": ["a"]})
    refused = None
except openai.BadRequestError as error:
    refused = {"status": error.status_code, "message": error.message, "body": error.body}

print(json.dumps({"answer": answer, "refused": refused}))
