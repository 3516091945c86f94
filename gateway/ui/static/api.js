// The server's API as the page uses it: the chat models, a streamed chat completion read as
// Server-Sent Events from a ReadableStream, and cancellation by X-Request-ID. Every call sends
// the stored API key, if any, as `Authorization: Bearer`.

import { loadKey } from "./store.js";

// 401: no key, or the wrong one (`sent` says whether a key went with the request).
export class AuthError extends Error {
  constructor(sent) {
    super(sent ? "The server refused the API key." : "The server needs an API key.");
    this.sent = sent;
  }
}

function headers(extra = {}) {
  const key = loadKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

// The error of a non-2xx answer: its message (OpenAI's envelope), else its status; `status` set.
async function failure(response) {
  if (response.status === 401) return new AuthError(Boolean(loadKey()));
  let message = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    message = body.error?.message ?? message;
  } catch {
    // not JSON: keep the status
  }
  return Object.assign(new Error(message), { status: response.status });
}

// A fresh id, for X-Request-ID and conversations (crypto.randomUUID needs a secure context; a LAN
// address over http is not one).
export function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return "ui-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// The served models that chat: [{id, capabilities}].
export async function chatModels() {
  const response = await fetch("/v1/models", { headers: headers() });
  if (!response.ok) throw await failure(response);
  const body = await response.json();
  return body.data
    .map((m) => ({ id: m.id, capabilities: m.laneserve?.capabilities ?? [] }))
    .filter((m) => m.capabilities.includes("chat"));
}

// POST /v1/chat/completions (stream: true); the Response once the server accepted it.
export async function startChat(body, requestId, signal) {
  const response = await fetch("/v1/chat/completions", {
    method: "POST",
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream", "X-Request-ID": requestId }),
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal,
  });
  if (!response.ok) throw await failure(response);
  return response;
}

// The stream's events (parsed JSON objects), in batches: each batch holds the events completed
// by one read from the network, so the page renders once per read. Ends at `data: [DONE]`.
export async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      pending += value;
      const blocks = pending.split(/\r?\n\r?\n/);
      pending = blocks.pop();
      const batch = [];
      let finished = false;
      for (const block of blocks) {
        const data = block.split(/\r?\n/).filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
        if (data === "[DONE]") finished = true;
        else if (data) batch.push(JSON.parse(data)); // ": keep-alive" comments carry no data
      }
      if (batch.length) yield batch;
      if (finished) return;
    }
  } finally {
    reader.releaseLock();
  }
}

// DELETE /v1/requests/{id}: true when the server cancelled it (false: already over, or unknown).
export async function cancel(requestId) {
  const response = await fetch(`/v1/requests/${encodeURIComponent(requestId)}`, {
    method: "DELETE",
    headers: headers(),
    signal: AbortSignal.timeout(5000),
  });
  return response.ok;
}
