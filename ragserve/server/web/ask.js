// The Ask view: a conversation of cited answers from /v1/answers and plain chat with the model,
// both streamed; a citation opens its passage with the quoted span highlighted. Each question
// goes with the conversation so far (a follow-up is read with the earlier questions); "New
// conversation" starts over.

import { $, api, authHeaders, el, events, failure } from "./common.js";

// The answered turns so far, as chat messages (a failed turn leaves nothing behind).
const conversation = [];
// The earlier messages sent with a question to /v1/answers (the server takes up to 64 and reads
// the most recent user turns).
const MAX_EARLIER = 32;
let inFlight = null;

function appendTurn(question) {
  const reply = el("div", { class: "reply" }, el("span", { class: "badge chat" }, "thinking…"));
  const text = el("p", { class: "text" });
  reply.append(text);
  $("#conversation").append(
    el("li", {}, el("p", { class: "question" }, question)),
    el("li", {}, reply),
  );
  reply.scrollIntoView({ block: "nearest" });
  return { reply, text };
}

const MODE_LABELS = {
  generated: "generated answer",
  extractive: "extractive quote",
  refused: "refusal",
  chat: "model chat",
  stopped: "stopped",
  error: "error",
};

function setBadge(reply, mode) {
  const badge = reply.querySelector(".badge");
  badge.className = `badge ${mode}`;
  badge.textContent = MODE_LABELS[mode];
}

// The answer's text with each [n] turned into a button that opens citation n.
function answerText(answer, byNumber) {
  const nodes = [];
  let last = 0;
  for (const match of answer.matchAll(/\[(\d+)\]/g)) {
    const citation = byNumber.get(Number(match[1]));
    if (!citation) continue;
    nodes.push(document.createTextNode(answer.slice(last, match.index)));
    nodes.push(
      el(
        "button",
        {
          type: "button",
          class: "quiet cite-ref",
          "aria-label": `Open citation ${citation.n}: ${citation.title}`,
          onclick: () => openCitation(citation),
        },
        `[${citation.n}]`,
      ),
    );
    last = match.index + match[0].length;
  }
  nodes.push(document.createTextNode(answer.slice(last)));
  return nodes;
}

function citationList(citations, label) {
  const list = el("ol", { class: "citations", "aria-label": label });
  for (const citation of citations) {
    list.append(
      el(
        "li",
        {},
        el(
          "button",
          { type: "button", class: "citation", onclick: () => openCitation(citation) },
          el("strong", {}, `[${citation.n}] ${citation.title}`),
          el("br"),
          `“${citation.quote}”`,
        ),
      ),
    );
  }
  return list;
}

function renderAnswer({ reply, text }, result, clientTimes, question) {
  setBadge(reply, result.mode);
  const byNumber = new Map(result.citations.map((c) => [c.n, c]));
  text.replaceChildren(...answerText(result.answer, byNumber));
  if (result.citations.length) reply.append(citationList(result.citations, "Citations"));
  // A refusal's text says why: nothing matched ("no_match"), or the passages that matched do
  // not state the answer ("not_stated"), shown as the related passages, cited.
  const refusal = result.refusal;
  if (refusal) {
    text.classList.add("refusal-reason");
    if (refusal.reason) text.classList.add(refusal.reason);
    if (refusal.reason === "not_stated" && refusal.related?.length) {
      reply.append(
        el("p", { class: "meta" }, "The closest passages you can read:"),
        citationList(refusal.related, "Related passages"),
      );
    }
  }
  // A follow-up is searched for as a standalone question: say what was searched.
  const query = (result.query || "").trim();
  if (query && query.toLowerCase() !== question.trim().toLowerCase()) {
    reply.append(el("p", { class: "meta query" }, `Searched for: ${query}`));
  }
  const t = result.timings || {};
  const parts = [];
  if (t.retrieval_ms !== undefined) parts.push(`retrieval ${Math.round(t.retrieval_ms)} ms`);
  if (t.ttft_ms !== undefined) parts.push(`first token ${Math.round(t.ttft_ms)} ms`);
  else if (clientTimes.first) parts.push(`first text ${clientTimes.first} ms`);
  if (t.total_ms !== undefined) parts.push(`server ${Math.round(t.total_ms)} ms`);
  parts.push(`total ${clientTimes.total} ms`);
  reply.append(el("p", { class: "timings" }, parts.join(" · ")));
}

async function openCitation(citation) {
  const panel = $("#passage");
  $("#passage-title").textContent = `[${citation.n}] ${citation.title}`;
  $("#passage-source").textContent = citation.doc_id;
  const body = $("#passage-text");
  body.replaceChildren("Loading…");
  panel.hidden = false;
  try {
    const chunks = (await api(`/v1/documents/${encodeURIComponent(citation.doc_id)}/chunks`)).data;
    const chunk = chunks.find((c) => c.chunk_id === citation.chunk_id) ||
      chunks.find((c) => c.start <= citation.start && citation.end <= c.end);
    if (!chunk) {
      body.replaceChildren("This passage is no longer in the document (it changed since).");
    } else {
      const from = Math.max(0, citation.start - chunk.start);
      const to = Math.min(chunk.text.length, citation.end - chunk.start);
      const mark = el("mark", {}, chunk.text.slice(from, to));
      body.replaceChildren(chunk.text.slice(0, from), mark, chunk.text.slice(to));
      mark.scrollIntoView({ block: "center" });
    }
  } catch (error) {
    body.replaceChildren(`Cannot open the passage: ${error.message}`);
  }
  panel.focus();
}

async function ask(question, mode, style) {
  const turn = appendTurn(question);
  const controller = new AbortController();
  inFlight = controller;
  $("#ask-button").disabled = true;
  $("#stop-button").hidden = false;
  const started = performance.now();
  const clientTimes = { first: null, total: null };
  const firstText = () => {
    if (clientTimes.first === null) clientTimes.first = Math.round(performance.now() - started);
  };
  try {
    if (mode === "chat") {
      const messages = [...conversation, { role: "user", content: question }];
      const models = await api("/v1/models");
      const response = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: authHeaders({ "Content-Type": "application/json" }),
        body: JSON.stringify({ model: models.data[0].id, messages, stream: true }),
        signal: controller.signal,
      });
      if (!response.ok) throw await failure(response);
      setBadge(turn.reply, "chat");
      let content = "";
      for await (const chunk of events(response)) {
        if (chunk.error) throw new Error(chunk.error.message || "the stream failed");
        const delta = chunk.choices?.[0]?.delta?.content;
        if (delta) {
          firstText();
          content += delta;
          turn.text.textContent = content;
        }
      }
      // Kept only once answered, so a failed turn does not leave an unanswered question behind.
      conversation.push(messages.at(-1), { role: "assistant", content });
      clientTimes.total = Math.round(performance.now() - started);
      turn.reply.append(
        el("p", { class: "timings" }, `first text ${clientTimes.first} ms · total ${clientTimes.total} ms`),
      );
      return;
    }
    const messages = [...conversation.slice(-MAX_EARLIER), { role: "user", content: question }];
    const body = { messages, stream: true };
    if (style) body.answer_style = style;
    const response = await fetch("/v1/answers", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json" }),
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!response.ok) throw await failure(response);
    let draft = "";
    for await (const event of events(response)) {
      if (event.type === "token") {
        firstText();
        draft += event.text;
        turn.text.textContent = draft;
      } else if (event.type === "answer") {
        firstText();
        clientTimes.total = Math.round(performance.now() - started);
        renderAnswer(turn, event, clientTimes, question);
        conversation.push(messages.at(-1), { role: "assistant", content: event.answer });
      } else if (event.type === "error") {
        throw new Error(event.message);
      }
    }
  } catch (error) {
    const stopped = error.name === "AbortError";
    setBadge(turn.reply, stopped ? "stopped" : "error");
    turn.reply.append(el("p", { class: "error", role: "alert" }, stopped ? "Stopped." : error.message));
  } finally {
    inFlight = null;
    $("#ask-button").disabled = false;
    $("#stop-button").hidden = true;
  }
}

export function resetAsk() {
  if (inFlight) inFlight.abort();
  conversation.length = 0;
  $("#conversation").replaceChildren();
  $("#passage").hidden = true;
}

// The answer style applies to answers from documents only.
function showStyle() {
  $("#style-field").hidden = new FormData($("#ask-form")).get("mode") !== "answer";
}

export function wireAsk() {
  $("#ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const question = $("#question").value.trim();
    if (!question || inFlight) return;
    $("#question").value = "";
    const form = new FormData(event.target);
    ask(question, form.get("mode"), form.get("style"));
  });
  $("#ask-form").addEventListener("change", showStyle);
  $("#new-conversation").addEventListener("click", () => {
    resetAsk();
    $("#question").focus();
  });
  $("#question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("#ask-form").requestSubmit();
    }
  });
  $("#stop-button").addEventListener("click", () => inFlight && inFlight.abort());
  $("#passage-close").addEventListener("click", () => {
    $("#passage").hidden = true;
    $("#question").focus();
  });
}
