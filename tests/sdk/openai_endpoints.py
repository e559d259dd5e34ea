"""Drives the gateway's other OpenAI endpoints with the official OpenAI
Python SDK, one call at a time: completions and responses (plain and
streamed), responses.compact, embeddings, moderations, images.generate,
images.edit (GW_IMAGE uploaded), audio transcriptions and translations
(GW_AUDIO uploaded) and audio.speech (streamed to GW_OUT). Prints a JSON
summary of what came back, raw JSON bodies included."""

import json
import os
import warnings

from openai import OpenAI

warnings.simplefilter("ignore", DeprecationWarning)

client = OpenAI(base_url=os.environ["GW_BASE_URL"], api_key=os.environ["GW_API_KEY"], max_retries=0)
image_path = os.environ["GW_IMAGE"]
audio_path = os.environ["GW_AUDIO"]
out = {}


def raw(call, **kwargs):
    """Calls `call` through with_raw_response: (parsed, raw JSON body)."""
    response = call(**kwargs)
    return response.parse(), json.loads(response.text)


completion, body = raw(
    client.completions.with_raw_response.create, model="gpt-3.5-turbo-instruct", prompt="Say hello", max_tokens=16
)
out["completion"] = {"text": completion.choices[0].text, "usage": completion.usage.to_dict(), "body": body}

text, usage_chunks = "", 0
for chunk in client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Say hello", stream=True):
    text += "".join(c.text for c in chunk.choices)
    usage_chunks += chunk.usage is not None
out["completion_stream"] = {"text": text, "usage_chunks": usage_chunks}

response, body = raw(client.responses.with_raw_response.create, model="gpt-4.1-mini", input="Say hello")
out["response"] = {"text": response.output_text, "usage": response.usage.to_dict(), "body": body}

deltas, completed = "", None
for event in client.responses.create(model="gpt-4.1-mini", input="Say hello", stream=True):
    if event.type == "response.output_text.delta":
        deltas += event.delta
    elif event.type == "response.completed":
        completed = event.response
out["response_stream"] = {"text": deltas, "final_text": completed.output_text, "usage": completed.usage.to_dict()}

compacted, body = raw(
    client.responses.with_raw_response.compact,
    model="gpt-4.1-mini",
    input=[{"role": "user", "content": "Summarize our launch checklist."}],
)
out["compact"] = {"object": compacted.object, "usage": compacted.usage.to_dict(), "body": body}

embeddings, body = raw(
    client.embeddings.with_raw_response.create, model="text-embedding-3-small", input=["alpha", "beta"]
)
out["embeddings"] = {"vectors": [e.embedding for e in embeddings.data], "usage": embeddings.usage.to_dict(), "body": body}

moderation, body = raw(client.moderations.with_raw_response.create, input="I will kill the bugs in this code")
out["moderation"] = {"flagged": moderation.results[0].flagged, "model": moderation.model, "body": body}

images, body = raw(client.images.with_raw_response.generate, model="gpt-image-1", prompt="a lighthouse", n=2)
out["images"] = {"b64": [i.b64_json for i in images.data], "body": body}

with open(image_path, "rb") as image:
    edited, body = raw(
        client.images.with_raw_response.edit,
        model="gpt-image-1",
        image=("input.png", image, "image/png"),
        prompt="add a rainbow",
    )
out["image_edit"] = {"b64": [i.b64_json for i in edited.data], "body": body}

with open(audio_path, "rb") as audio:
    transcription, body = raw(
        client.audio.transcriptions.with_raw_response.create, model="whisper-1", file=("speech.mp3", audio, "audio/mpeg")
    )
out["transcription"] = {"text": transcription.text, "body": body}

with open(audio_path, "rb") as audio:
    verbose, body = raw(
        client.audio.transcriptions.with_raw_response.create,
        model="gpt-4o-transcribe",
        file=("speech.mp3", audio, "audio/mpeg"),
        response_format="json",
    )
out["transcription_tokens"] = {"text": verbose.text, "body": body}

with open(audio_path, "rb") as audio:
    translation = client.audio.translations.create(
        model="whisper-1", file=("speech.mp3", audio, "audio/mpeg"), response_format="text"
    )
out["translation"] = {"text": translation if isinstance(translation, str) else translation.text}

with client.audio.speech.with_streaming_response.create(
    model="tts-1", voice="alloy", input=os.environ["GW_SPEECH_INPUT"]
) as speech:
    chunks = 0
    with open(os.environ["GW_OUT"], "wb") as target:
        for chunk in speech.iter_bytes():
            chunks += 1
            target.write(chunk)
    out["speech"] = {"content_type": speech.headers.get("content-type"), "chunks": chunks}

print(json.dumps(out))
