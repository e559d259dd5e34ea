"""Drives the gateway's video API with the official OpenAI Python SDK:
videos.create (with an input_reference image) on one data plane,
videos.retrieve until done and videos.download_content on another. Writes
the video to GW_OUT (and the thumbnail variant to GW_OUT + ".thumbnail");
prints a JSON summary."""

import json
import os
import time
import warnings

from openai import OpenAI

# The SDK marks the video API deprecated; that is not this test's concern.
warnings.simplefilter("ignore", DeprecationWarning)

key = os.environ["GW_API_KEY"]
submit = OpenAI(base_url=os.environ["GW_BASE_URL_1"], api_key=key, max_retries=0)
poll = OpenAI(base_url=os.environ["GW_BASE_URL_2"], api_key=key, max_retries=0)
out = os.environ["GW_OUT"]

with open(os.environ["GW_IMAGE"], "rb") as image:
    created = submit.videos.create(
        model=os.environ["GW_MODEL"],
        prompt=os.environ.get("GW_PROMPT", "a paper boat on a calm lake at dawn"),
        seconds="4",
        size="1280x720",
        input_reference=("reference.png", image, "image/png"),
    )

statuses = [created.status]
deadline = time.monotonic() + 60
raw = poll.videos.with_raw_response.retrieve(created.id)
poll_after_ms = raw.headers.get("openai-poll-after-ms")
video = raw.parse()
while video.status in ("queued", "in_progress"):
    if time.monotonic() > deadline:
        raise SystemExit(f"video {created.id} still {video.status} after 60 s")
    time.sleep(0.25)
    video = poll.videos.retrieve(created.id)
    if statuses[-1] != video.status:
        statuses.append(video.status)

summary = {
    "created": created.to_dict(),
    "final": video.to_dict(),
    "statuses": statuses,
    "poll_after_ms": poll_after_ms,
}
if video.status == "completed":
    poll.videos.download_content(created.id).write_to_file(out)
    poll.videos.download_content(created.id, variant="thumbnail").write_to_file(out + ".thumbnail")
print(json.dumps(summary))
