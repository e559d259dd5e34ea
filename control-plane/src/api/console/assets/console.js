// The console's one script: copy buttons, confirmations and the
// playground's streamed chat. Every page reads without it.
"use strict";

document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const field = document.getElementById(button.dataset.copy);
  if (!field) return;
  field.select();
  const done = () => { button.textContent = "Copied"; };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(field.value).then(done, () => { document.execCommand("copy"); done(); });
  } else {
    document.execCommand("copy");
    done();
  }
});

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
});

// The playground: keeps the conversation, sends it, and shows the answer
// as its events arrive (chat completions chunks or messages deltas).
(() => {
  const form = document.getElementById("playground");
  if (!form) return;
  const transcript = document.getElementById("transcript");
  const prompt = document.getElementById("prompt");
  const error = document.getElementById("playground-error");
  const history = [];

  const line = (role, text) => {
    const p = document.createElement("p");
    p.className = role;
    p.textContent = (role === "user" ? "You: " : "") + text;
    transcript.appendChild(p);
    return p;
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const text = prompt.value.trim();
    if (!text) return;
    history.push({ role: "user", content: text });
    line("user", text);
    prompt.value = "";
    const answer = line("assistant", "");
    answer.setAttribute("data-streaming", "true");
    const dialect = form.dialect.value;
    let reply = "";
    try {
      const response = await fetch(form.dataset.send, {
        method: "POST",
        headers: { "content-type": "application/json", "x-csrf-token": form.csrf.value },
        body: JSON.stringify({ model: form.model.value, dialect, messages: history }),
        credentials: "same-origin",
      });
      if (!response.ok) {
        const body = await response.text();
        let message = body;
        try { const json = JSON.parse(body); message = (json.error && json.error.message) || body; } catch (_) {}
        throw new Error(response.status + ": " + message.replace(/<[^>]*>/g, " ").trim().slice(0, 400));
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n")) >= 0) {
          const row = buffer.slice(0, cut).trim();
          buffer = buffer.slice(cut + 1);
          if (!row.startsWith("data:")) continue;
          const data = row.slice(5).trim();
          if (data === "[DONE]") continue;
          let event;
          try { event = JSON.parse(data); } catch (_) { continue; }
          let piece = "";
          if (event.choices && event.choices[0] && event.choices[0].delta) piece = event.choices[0].delta.content || "";
          if (event.type === "content_block_delta" && event.delta) piece = event.delta.text || "";
          if (event.error) throw new Error(event.error.message || "the stream failed");
          reply += piece;
          answer.textContent = reply;
        }
      }
      history.push({ role: "assistant", content: reply });
    } catch (failure) {
      history.pop();
      error.textContent = String(failure.message || failure);
      error.hidden = false;
    } finally {
      answer.removeAttribute("data-streaming");
      answer.setAttribute("data-done", "true");
    }
  });
})();
