// The Documents view: the documents a key may read, their chunks, and for writer and admin keys
// uploads, access lists and deletes (each control shown only where the permission allows).

import { $, api, authHeaders, el, mayRole, plural } from "./common.js";

let documents = [];

function matches(document_, words) {
  const haystack = `${document_.title} ${document_.id} ${document_.source}`.toLowerCase();
  return words.every((word) => haystack.includes(word));
}

function renderDocuments() {
  const words = $("#doc-filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  const shown = documents.filter((d) => matches(d, words));
  const rows = shown.map((d) =>
    el(
      "tr",
      { onclick: () => openDocument(d.id) },
      el(
        "td",
        {},
        el("a", {
          href: `#documents/${encodeURIComponent(d.id)}`,
          onclick: (event) => {
            event.preventDefault();
            event.stopPropagation();
            openDocument(d.id);
          },
        }, d.title || d.id),
      ),
      el("td", {}, d.id),
      el("td", {}, d.owner),
      el("td", {}, String(d.num_chunks)),
      el("td", {}, d.permission || ""),
    ),
  );
  $("#doc-table tbody").replaceChildren(...rows);
  $("#doc-count").textContent =
    `${shown.length} of ${documents.length} documents you may read`;
}

export async function loadDocuments() {
  try {
    // Page by page (the list is paged by id); the filter below works on the whole list.
    const all = [];
    let after = null;
    do {
      const query = after === null ? "" : `&after=${encodeURIComponent(after)}`;
      const page = await api(`/v1/documents?limit=1000${query}`);
      all.push(...page.data);
      after = page.has_more ? page.last_id : null;
    } while (after !== null);
    documents = all;
    renderDocuments();
  } catch (error) {
    $("#doc-count").textContent = `Cannot list documents: ${error.message}`;
  }
}

async function searchText() {
  const query = $("#doc-filter").value.trim();
  const list = $("#search-results");
  if (!query) {
    list.hidden = true;
    return;
  }
  try {
    const hits = (await api("/v1/search", {
      method: "POST",
      body: JSON.stringify({ query, top_k: 10 }),
    })).data;
    list.replaceChildren(
      ...hits.map((hit) =>
        el(
          "li",
          {},
          el("button", { type: "button", class: "quiet", onclick: () => openDocument(hit.doc_id) },
            hit.title || hit.doc_id),
          el("p", { class: "meta" }, hit.text.slice(0, 300)),
        ),
      ),
    );
    if (!hits.length) list.replaceChildren(el("li", {}, "No passage matches."));
    list.hidden = false;
  } catch (error) {
    list.replaceChildren(el("li", { class: "error" }, error.message));
    list.hidden = false;
  }
}

let openDocumentId = null;

const PERMISSION_RANK = { read: 0, write: 1, manage: 2 };

function aclRow(kind = "user", name = "", permission = "read") {
  const row = el("tr");
  const kindSelect = el("select", { "aria-label": "Kind", class: "acl-kind" },
    el("option", { value: "user" }, "user"), el("option", { value: "group" }, "group"));
  kindSelect.value = kind;
  const nameInput = el("input", { "aria-label": "Name", class: "acl-name", required: "" });
  nameInput.value = name;
  const permissionSelect = el("select", { "aria-label": "Permission", class: "acl-permission" },
    ...["read", "write", "manage"].map((p) => el("option", { value: p }, p)));
  permissionSelect.value = permission;
  row.append(
    el("td", {}, kindSelect),
    el("td", {}, nameInput),
    el("td", {}, permissionSelect),
    el("td", {}, el("button", { type: "button", class: "quiet", "aria-label": "Remove this entry",
      onclick: () => row.remove() }, "Remove")),
  );
  return row;
}

function aclEntries(acl) {
  const entries = [];
  for (const kind of ["users", "groups"]) {
    for (const [name, permission] of Object.entries(acl[kind] || {})) {
      entries.push([kind === "users" ? "user" : "group", name, permission]);
    }
  }
  return entries;
}

async function openDocument(id) {
  openDocumentId = id;
  const detail = $("#doc-detail");
  try {
    const [doc, chunks] = await Promise.all([
      api(`/v1/documents/${encodeURIComponent(id)}`),
      api(`/v1/documents/${encodeURIComponent(id)}/chunks`),
    ]);
    $("#detail-title").textContent = doc.title || doc.id;
    const when = new Date(doc.ingested_at * 1000).toLocaleString();
    $("#detail-meta").textContent =
      `${doc.id} · source ${doc.source} · owner ${doc.owner} · version ${doc.version} · ` +
      `${plural(doc.num_chunks, "chunk")} · ingested ${when} · your access: ${doc.permission}`;
    const level = PERMISSION_RANK[doc.permission] ?? -1;
    const writerKey = mayRole("writer");
    for (const node of detail.querySelectorAll("[data-needs]")) {
      node.hidden = !writerKey || level < PERMISSION_RANK[node.dataset.needs];
    }
    const managing = writerKey && level >= PERMISSION_RANK.manage;
    $("#acl-view").hidden = managing;
    $("#acl-view").replaceChildren(
      el("h3", {}, "Access"),
      el("p", {}, aclEntries(doc.acl).map(([k, n, p]) => `${k} ${n}: ${p}`).join(" · ") ||
        "Only the owner."),
    );
    $("#acl-table tbody").replaceChildren(...aclEntries(doc.acl).map((e) => aclRow(...e)));
    $("#acl-message").textContent = "";
    $("#chunk-list").replaceChildren(
      ...chunks.data.map((c) =>
        el("li", {}, el("span", { class: "meta" }, `characters ${c.start}–${c.end}`), c.text),
      ),
    );
    detail.hidden = false;
    detail.focus();
  } catch (error) {
    $("#doc-message").textContent = `Cannot open ${id}: ${error.message}`;
  }
}

async function saveAcl(event) {
  event.preventDefault();
  const acl = { users: {}, groups: {} };
  for (const row of $("#acl-table tbody").rows) {
    const name = row.querySelector(".acl-name").value.trim();
    if (!name) continue;
    const kind = row.querySelector(".acl-kind").value === "user" ? "users" : "groups";
    acl[kind][name] = row.querySelector(".acl-permission").value;
  }
  try {
    await api(`/v1/documents/${encodeURIComponent(openDocumentId)}/acl`, {
      method: "PUT",
      body: JSON.stringify(acl),
    });
    await openDocument(openDocumentId);
    $("#acl-message").textContent = "Access saved.";
    loadDocuments();
  } catch (error) {
    $("#acl-message").textContent = `Not saved: ${error.message}`;
  }
}

function confirmDelete(title) {
  const dialog = $("#confirm-dialog");
  $("#confirm-text").textContent = `Delete “${title}”? Its text leaves every answer at once.`;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = ""; // Escape closes without setting it
    dialog.showModal();
  });
}

async function deleteDocument() {
  const id = openDocumentId;
  if (!(await confirmDelete($("#detail-title").textContent))) return;
  try {
    await api(`/v1/documents/${encodeURIComponent(id)}`, { method: "DELETE" });
    $("#doc-detail").hidden = true;
    $("#doc-message").textContent = `Deleted ${id}.`;
    await loadDocuments();
  } catch (error) {
    $("#doc-message").textContent = `Not deleted: ${error.message}`;
  }
}

function uploadFile(file) {
  const progress = el("progress", { max: "100", value: "0", "aria-label": `Upload of ${file.name}` });
  const outcome = el("span", {}, "uploading…");
  $("#upload-list").append(el("li", {}, el("span", {}, file.name), progress, outcome));
  return new Promise((resolve) => {
    const form = new FormData();
    form.append("file", file, file.name);
    const request = new XMLHttpRequest();
    request.open("POST", "/v1/documents");
    request.setRequestHeader("Authorization", authHeaders().Authorization);
    request.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) progress.value = Math.round((100 * event.loaded) / event.total);
    });
    request.addEventListener("load", () => {
      let body = {};
      try {
        body = JSON.parse(request.responseText);
      } catch {
        // keep the status line
      }
      if (request.status >= 200 && request.status < 300) {
        progress.value = 100;
        outcome.className = "done";
        outcome.textContent = `stored as ${body.id} (${plural(body.num_chunks, "chunk")})`;
      } else {
        outcome.className = "failed";
        outcome.textContent = `refused: ${body.error?.message || `${request.status} ${request.statusText}`}`;
      }
      resolve();
    });
    request.addEventListener("error", () => {
      outcome.className = "failed";
      outcome.textContent = "failed: the connection broke";
      resolve();
    });
    request.send(form);
  });
}

async function uploadFiles(files) {
  // One at a time: each file's error stays its own and the server embeds one after another.
  for (const file of files) await uploadFile(file);
  await loadDocuments();
}

export function resetDocuments() {
  documents = [];
  $("#doc-message").textContent = "";
  $("#doc-table tbody").replaceChildren();
  $("#doc-detail").hidden = true;
}

export function wireDocuments() {
  $("#doc-filter").addEventListener("input", renderDocuments);
  $("#doc-filter").addEventListener("keydown", (event) => {
    if (event.key === "Enter") searchText();
  });
  $("#doc-search").addEventListener("click", searchText);
  $("#detail-close").addEventListener("click", () => {
    $("#doc-detail").hidden = true;
  });
  $("#acl-add").addEventListener("click", () => {
    const row = aclRow();
    $("#acl-table tbody").append(row);
    row.querySelector("input").focus();
  });
  $("#acl-form").addEventListener("submit", saveAcl);
  $("#delete-document").addEventListener("click", deleteDocument);
  $("#file-input").addEventListener("change", (event) => {
    uploadFiles([...event.target.files]);
    event.target.value = "";
  });
  const zone = $("#dropzone");
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    uploadFiles([...event.dataTransfer.files]);
  });
}
