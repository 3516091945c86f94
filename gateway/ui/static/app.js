// The chat page: model picker, conversations (kept in localStorage), a streamed answer with its
// reasoning, tool calls and statistics, Stop, settings, the API-key prompt, and images attached to
// a message for models with the `vision` capability (attach.js).

import { AuthError, cancel, chatModels, events, newId, startChat } from "./api.js";
import { attachments } from "./attach.js";
import { element, fillAnswer, messageNode } from "./messages.js";
import * as store from "./store.js";

const $ = (id) => document.getElementById(id);
const ui = {
  layout: $("layout"), main: document.querySelector("main"), conversations: $("conversations"),
  newChat: $("new-chat"), toggleSidebar: $("toggle-sidebar"), model: $("model"), toggleSettings: $("toggle-settings"),
  settings: $("settings"), system: $("system"), temperature: $("temperature"), maxTokens: $("max-tokens"),
  setKey: $("set-key"), forgetKey: $("forget-key"), status: $("status"), messages: $("messages"),
  composer: $("composer"), prompt: $("prompt"), send: $("send"), stop: $("stop"), keyDialog: $("key-dialog"),
  keyReason: $("key-reason"), key: $("key"), attach: $("attach"), attachFile: $("attach-file"),
  attachments: $("attachments"),
};

let conversations = store.loadConversations();
// the conversation shown; null: a new one, saved at its first message
let current = conversations.find((c) => c.id === store.loadCurrent()) ?? null;
let settings = store.loadSettings();
let active = null; // the answer streaming now: {requestId, controller, stopping}
let visionModels = new Set(); // the served models that take images

function showStatus(text) {
  ui.status.textContent = text;
  ui.status.hidden = !text;
}

function persist() {
  if (!store.saveConversations(conversations)) {
    showStatus("This browser did not save the conversation (storage full? images take room: delete old conversations).");
  }
}

const attached = attachments({ button: ui.attach, input: ui.attachFile, previews: ui.attachments, prompt: ui.prompt,
                               dropZone: ui.composer }, showStatus);

function showAttachControl() {
  attached.setEnabled(visionModels.has(ui.model.value));
}

// --- API key -------------------------------------------------------------------------------

// Asks for a key; resolves true once one is stored, false when the user cancelled.
function askKey(reason) {
  ui.keyReason.textContent = reason;
  ui.key.value = "";
  ui.keyDialog.returnValue = ""; // Escape closes without setting it: not the last dialog's "save"
  ui.keyDialog.showModal();
  return new Promise((resolve) => {
    ui.keyDialog.addEventListener("close", () => {
      const key = ui.key.value.trim();
      ui.key.value = "";
      if (ui.keyDialog.returnValue === "save" && key) {
        store.saveKey(key);
        resolve(true);
      } else {
        resolve(false);
      }
    }, { once: true });
  });
}

// `call()`, asking for the API key and calling again while the server answers 401.
async function withKey(call) {
  for (;;) {
    try {
      return await call();
    } catch (error) {
      if (!(error instanceof AuthError) || !(await askKey(error.message))) throw error;
    }
  }
}

// --- models and settings ---------------------------------------------------------------------

async function loadModels() {
  showStatus("Loading models…");
  try {
    const models = await withKey(chatModels);
    ui.model.replaceChildren(...models.map((m) => new Option(m.id, m.id)));
    if (models.some((m) => m.id === settings.model)) ui.model.value = settings.model;
    visionModels = new Set(models.filter((m) => m.capabilities.includes("vision")).map((m) => m.id));
    showAttachControl();
    ui.send.disabled = models.length === 0;
    showStatus(models.length ? "" : "This server serves no chat model.");
  } catch (error) {
    ui.send.disabled = true;
    showStatus(`Could not list the models: ${error.message}`);
  }
}

function showSettings() {
  ui.system.value = settings.system;
  ui.temperature.value = settings.temperature;
  ui.maxTokens.value = settings.maxTokens;
}

function readSettings() {
  settings = { model: ui.model.value, system: ui.system.value, temperature: ui.temperature.value,
               maxTokens: ui.maxTokens.value };
  store.saveSettings(settings);
}

// --- messages (their nodes: messages.js) ---------------------------------------------------------

function nearBottom() {
  const m = ui.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 40;
}

function showConversation() {
  ui.messages.replaceChildren(...(current?.messages ?? []).map(messageNode));
  ui.messages.scrollTop = ui.messages.scrollHeight;
  showConversationList();
}

function showConversationList() {
  ui.conversations.replaceChildren(...conversations.map((c) => {
    const open = element("button", "open", c.title || "Untitled");
    open.type = "button";
    open.addEventListener("click", () => select(c));
    const remove = element("button", "delete", "×");
    remove.type = "button";
    remove.title = `Delete “${c.title || "Untitled"}”`;
    remove.setAttribute("aria-label", remove.title);
    remove.addEventListener("click", () => removeConversation(c));
    return element("li", c === current ? "current" : "", open, remove);
  }));
}

// The conversation list as a drawer (narrow screens only: CSS ignores the class elsewhere).
function showSidebar(open) {
  ui.layout.classList.toggle("sidebar-open", open);
  ui.toggleSidebar.setAttribute("aria-expanded", String(open));
}

function select(conversation) {
  if (active) return;
  current = conversation;
  store.saveCurrent(current?.id ?? null);
  if (conversation?.model && [...ui.model.options].some((o) => o.value === conversation.model)) {
    ui.model.value = conversation.model;
    showAttachControl();
  }
  showSidebar(false);
  showConversation();
}

function removeConversation(conversation) {
  if (active && conversation === current) return;
  conversations = conversations.filter((c) => c !== conversation);
  persist();
  if (conversation === current) select(null);
  else showConversationList();
}

// --- one answer ------------------------------------------------------------------------------

function applyEvent(message, event) {
  if (event.error) {
    if (event.error.code === "request_cancelled") message.stopped = true;
    else message.error = event.error.message ?? "The server ended the answer with an error.";
    return;
  }
  for (const choice of event.choices ?? []) {
    const delta = choice.delta ?? {};
    if (delta.reasoning_content) message.reasoning = (message.reasoning ?? "") + delta.reasoning_content;
    if (delta.content) message.content += delta.content;
    for (const call of delta.tool_calls ?? []) {
      message.toolCalls ??= [];
      const seen = (message.toolCalls[call.index ?? 0] ??= { name: "", arguments: "" });
      seen.name += call.function?.name ?? "";
      seen.arguments += call.function?.arguments ?? "";
    }
    if (choice.finish_reason) message.finishReason = choice.finish_reason;
  }
  const stats = (message.stats ??= {});
  if (event.usage) {
    stats.promptTokens = event.usage.prompt_tokens;
    stats.completionTokens = event.usage.completion_tokens;
  }
  if ("ttft" in event) Object.assign(stats, { ttft: event.ttft, tps: event.tps, generatedTokens: event.generated_tokens });
}

// A turn as the API takes it: a user turn's images first (data: URIs in image_url parts), then its text;
// for a model without the vision capability, the text alone.
function apiMessage(m, vision) {
  if (!m.images?.length || !vision) return { role: m.role, content: m.content };
  const parts = m.images.map((url) => ({ type: "image_url", image_url: { url } }));
  if (m.content) parts.push({ type: "text", text: m.content });
  return { role: m.role, content: parts };
}

// The conversation for the next request; a turn the server refused (e.g. a bad image) is not sent again.
function requestBody(history) {
  const turns = history.filter((m) => !m.rejected && (m.role === "user" || m.content));
  const vision = visionModels.has(ui.model.value);
  if (!vision && turns.some((m) => m.images?.length)) {
    showStatus(`${ui.model.value} does not take images: this conversation's pictures were left out.`);
  }
  const messages = turns.map((m) => apiMessage(m, vision));
  if (settings.system.trim()) messages.unshift({ role: "system", content: settings.system });
  const body = { model: ui.model.value, messages };
  if (settings.temperature !== "") body.temperature = Number(settings.temperature);
  if (settings.maxTokens !== "") body.max_tokens = Number(settings.maxTokens);
  return body;
}

function setStreaming(on) {
  ui.send.hidden = on;
  ui.stop.hidden = !on;
  ui.stop.disabled = false;
  ui.model.disabled = on;
  ui.newChat.disabled = on;
}

async function send(text, images) {
  readSettings();
  showStatus(""); // the last message's notes (attachments, storage) are old now
  if (!current) {
    const title = text.slice(0, 60) || (images.length === 1 ? "Image" : `${images.length} images`);
    current = { id: newId(), title, model: ui.model.value, messages: [] };
    conversations.unshift(current);
    store.saveCurrent(current.id);
  } else {
    conversations = [current, ...conversations.filter((c) => c !== current)];
  }
  current.model = ui.model.value;
  current.updated = Date.now();
  const user = { role: "user", content: text, ...(images.length ? { images } : {}) };
  current.messages.push(user);
  const body = requestBody(current.messages);
  const message = { role: "assistant", content: "", requestId: newId() };
  current.messages.push(message);
  persist();
  showConversationList();
  ui.messages.append(messageNode(user));
  const node = messageNode(message);
  node.classList.add("streaming");
  ui.messages.append(node);
  ui.messages.scrollTop = ui.messages.scrollHeight;

  active = { requestId: message.requestId, controller: new AbortController() };
  setStreaming(true);
  try {
    const response = await withKey(() => startChat(body, message.requestId, active.controller.signal));
    for await (const batch of events(response)) {
      const follow = nearBottom();
      for (const event of batch) applyEvent(message, event);
      fillAnswer(node, message);
      if (follow) ui.messages.scrollTop = ui.messages.scrollHeight;
    }
  } catch (error) {
    if (error.name === "AbortError" || active.stopping) message.stopped = true;
    else message.error = error.message;
    if (error.status >= 400 && error.status < 500) user.rejected = true;
  } finally {
    active = null;
    node.classList.remove("streaming");
    fillAnswer(node, message);
    setStreaming(false);
    persist();
    ui.prompt.focus();
  }
}

// Stop: cancel on the server first (its record says `cancelled`, and a queued request leaves the
// queue), then close the stream whatever the server answered.
async function stop() {
  if (!active) return;
  const { requestId, controller } = active;
  active.stopping = true;
  ui.stop.disabled = true;
  try {
    await cancel(requestId);
  } catch {
    // unreachable or slow: aborting the fetch below still ends it (the server sees the disconnect)
  }
  controller.abort();
}

// --- wiring ----------------------------------------------------------------------------------

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = ui.prompt.value.trim();
  if ((!text && !attached.count()) || active || ui.send.disabled) return;
  ui.prompt.value = "";
  send(text, attached.take());
});
ui.prompt.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    ui.composer.requestSubmit();
  }
});
ui.stop.addEventListener("click", stop);
ui.newChat.addEventListener("click", () => select(null));
ui.toggleSidebar.addEventListener("click", (event) => {
  event.stopPropagation(); // not the click below that closes the drawer
  showSidebar(!ui.layout.classList.contains("sidebar-open"));
});
ui.main.addEventListener("click", () => showSidebar(false)); // a click beside the open drawer closes it
ui.toggleSettings.addEventListener("click", () => {
  ui.settings.hidden = !ui.settings.hidden;
  ui.toggleSettings.setAttribute("aria-expanded", String(!ui.settings.hidden));
});
ui.settings.addEventListener("submit", (event) => event.preventDefault());
ui.settings.addEventListener("change", readSettings);
ui.model.addEventListener("change", () => {
  readSettings();
  showAttachControl();
});
ui.setKey.addEventListener("click", async () => {
  if (await askKey("The API key for this server.")) loadModels();
});
ui.forgetKey.addEventListener("click", () => {
  store.saveKey(null);
  showStatus("API key forgotten.");
});

showSettings();
showConversation();
loadModels();
