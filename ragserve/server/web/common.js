// What every view shares: DOM helpers, the signed-in identity, and the HTTP client with the key.
// Server text reaches the page only through text nodes (el's children, textContent), never as
// HTML, so a document that contains markup shows it as text.

export const KEY_STORAGE = "ragserve.key";

export const $ = (selector) => document.querySelector(selector);

export const plural = (count, noun) => `${count} ${noun}${count === 1 ? "" : "s"}`;

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== false && value !== null && value !== undefined) node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

// The signed-in key's identity (GET /v1/me), null when signed out.
export const session = { me: null, onUnauthorized: () => {} };

const ROLE_RANK = { reader: 0, writer: 1, admin: 2 };

export function mayRole(role) {
  return session.me !== null && ROLE_RANK[session.me.role] >= ROLE_RANK[role];
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${sessionStorage.getItem(KEY_STORAGE) || ""}`, ...extra };
}

export async function failure(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch {
    // not JSON: keep the status line
  }
  if (response.status === 401 && session.me) session.onUnauthorized();
  return new ApiError(response.status, message);
}

export async function api(path, options = {}) {
  const headers = authHeaders(options.body ? { "Content-Type": "application/json" } : {});
  const response = await fetch(path, { ...options, headers });
  if (!response.ok) throw await failure(response);
  return response.json();
}

// Yields each JSON payload of a server-sent event stream until [DONE].
export async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
}
