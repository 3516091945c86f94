// What the page keeps in this browser's localStorage (per server origin): the conversations,
// the settings and the API key. A value that cannot be read back is treated as absent.

const CONVERSATIONS = "laneserve.conversations";
const CURRENT = "laneserve.current";
const SETTINGS = "laneserve.settings";
const API_KEY = "laneserve.apiKey";

export const DEFAULT_SETTINGS = { model: "", system: "", temperature: "", maxTokens: "" };

function read(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key));
    return value ?? fallback;
  } catch {
    return fallback;
  }
}

// false when the browser refused (storage full or disabled): the page keeps working unsaved.
function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false;
  }
}

// Conversations, newest first: {id, title, model, updated, messages: [...]}.
export function loadConversations() {
  const list = read(CONVERSATIONS, []);
  return Array.isArray(list) ? list.filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages)) : [];
}

export function saveConversations(list) {
  return write(CONVERSATIONS, list);
}

// The id of the conversation on screen (reopened by a reload), or null for a new one.
export function loadCurrent() {
  return read(CURRENT, null);
}

export function saveCurrent(id) {
  return write(CURRENT, id);
}

export function loadSettings() {
  return { ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) };
}

export function saveSettings(settings) {
  return write(SETTINGS, settings);
}

export function loadKey() {
  return localStorage.getItem(API_KEY);
}

export function saveKey(key) {
  if (key) localStorage.setItem(API_KEY, key);
  else localStorage.removeItem(API_KEY);
}
