// The conversation's messages as DOM nodes: a user turn (its attached pictures, then its text) and an
// assistant answer (reasoning, the answer as Markdown, tool calls, error, statistics), rebuilt as it streams.

import { renderMarkdown } from "./markdown.js";

export function element(tag, className, ...children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  node.append(...children);
  return node;
}

function statsText(message) {
  const s = message.stats ?? {};
  const parts = [];
  if (s.ttft != null) parts.push(`TTFT ${Math.round(s.ttft * 1000)} ms`);
  if (s.tps) parts.push(`${s.tps.toFixed(1)} tok/s`);
  if (s.promptTokens != null) parts.push(`${s.promptTokens} prompt tokens`);
  const generated = s.completionTokens ?? s.generatedTokens;
  if (generated != null) parts.push(`${generated} generated`);
  if (message.stopped) parts.push("stopped");
  else if (message.finishReason === "length") parts.push("cut at max tokens");
  return parts.join(" · ");
}

// The nodes of an assistant answer (rebuilt as it streams: the text is re-rendered whole).
export function fillAnswer(node, message) {
  const reasoning = node.querySelector(".reasoning");
  reasoning.hidden = !message.reasoning;
  reasoning.querySelector(".reasoning-text").textContent = message.reasoning ?? "";
  const thinking = node.classList.contains("streaming") && !message.content;
  reasoning.querySelector("summary").textContent = thinking ? "Thinking…" : "Reasoning";
  node.querySelector(".answer").replaceChildren(renderMarkdown(message.content ?? ""));
  const calls = (message.toolCalls ?? []).filter(Boolean).map((call) =>
    element("pre", "tool-call", element("span", "tool-name", `${call.name}(`), call.arguments, ")"));
  node.querySelector(".tool-calls").replaceChildren(...calls);
  node.querySelector(".error").textContent = message.error ?? "";
  node.querySelector(".stats").textContent = statsText(message);
  if (message.requestId) node.dataset.requestId = message.requestId;
}

function userNode(message) {
  const node = element("article", "message user");
  if (message.images?.length) {
    node.append(element("div", "images", ...message.images.map((url, k) => {
      const img = element("img");
      // a data: URI the user attached (the page's policy loads images from data: and itself only)
      img.src = url;
      img.alt = `image ${k + 1}`;
      return img;
    })));
  }
  if (message.content) node.append(element("div", "text", message.content));
  return node;
}

export function messageNode(message) {
  if (message.role === "user") return userNode(message);
  const reasoning = element("details", "reasoning", element("summary"), element("div", "reasoning-text"));
  const node = element("article", "message assistant", reasoning, element("div", "answer"),
                       element("div", "tool-calls"), element("p", "error"), element("p", "stats"));
  fillAnswer(node, message);
  return node;
}
