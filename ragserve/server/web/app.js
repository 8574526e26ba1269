// The page's entry: sign in and out, and which view shows (the hash names it).

import { wireAsk, resetAsk } from "./ask.js";
import { $, KEY_STORAGE, api, mayRole, session } from "./common.js";
import { loadDocuments, resetDocuments, wireDocuments } from "./documents.js";
import { startStatus, stopStatus } from "./status.js";

const VIEWS = ["ask", "documents", "status"];

async function signIn(key) {
  sessionStorage.setItem(KEY_STORAGE, key);
  try {
    session.me = await api("/v1/me");
  } catch (error) {
    sessionStorage.removeItem(KEY_STORAGE);
    session.me = null;
    throw error;
  }
  const groups = session.me.groups.length ? session.me.groups.join(", ") : "no groups";
  $("#identity-text").textContent =
    `${session.me.user} · ${session.me.role} · tenant ${session.me.tenant} · ${groups}`;
  for (const node of document.querySelectorAll("[data-role]")) {
    node.hidden = !mayRole(node.dataset.role);
  }
  $("#identity").hidden = false;
  $("#views-nav").hidden = false;
  $("#signin-view").hidden = true;
  show(location.hash.slice(1) || "ask");
}

function signOut(message = "") {
  sessionStorage.removeItem(KEY_STORAGE);
  session.me = null;
  stopStatus();
  resetAsk();
  resetDocuments();
  for (const id of ["#ask-view", "#documents-view", "#status-view", "#identity", "#views-nav"]) {
    $(id).hidden = true;
  }
  $("#signin-view").hidden = false;
  $("#signin-error").textContent = message;
  $("#api-key").value = "";
  $("#api-key").focus();
}

function show(view) {
  if (!VIEWS.includes(view)) view = "ask";
  if (view === "status" && !mayRole("admin")) view = "ask";
  for (const name of VIEWS) {
    $(`#${name}-view`).hidden = name !== view;
  }
  for (const button of document.querySelectorAll("#views-nav button")) {
    if (button.dataset.view === view) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  if (location.hash !== `#${view}`) history.replaceState(null, "", `#${view}`);
  stopStatus();
  if (view === "documents") loadDocuments();
  if (view === "status") startStatus();
}

function wire() {
  $("#signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("#signin-error").textContent = "";
    try {
      await signIn($("#api-key").value.trim());
    } catch (error) {
      $("#signin-error").textContent = `Cannot sign in: ${error.message}`;
    }
  });
  $("#sign-out").addEventListener("click", () => signOut());
  for (const button of document.querySelectorAll("#views-nav button")) {
    button.addEventListener("click", () => show(button.dataset.view));
  }
  window.addEventListener("hashchange", () => session.me && show(location.hash.slice(1)));
  session.onUnauthorized = () => signOut("Your key is no longer valid.");
  wireAsk();
  wireDocuments();
}

wire();
if (sessionStorage.getItem(KEY_STORAGE)) {
  signIn(sessionStorage.getItem(KEY_STORAGE)).catch(() => signOut("Please sign in again."));
} else {
  $("#api-key").focus();
}
