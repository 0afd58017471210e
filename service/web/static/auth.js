// Access tokens in the dashboard. When the API answers 401 a sign-in dialog asks for a token; it is kept in
// sessionStorage only (this tab, gone when the tab closes; never in a URL or a cookie) and sent as
// `Authorization: Bearer` on every API call (api.js), image (widgets.js), upload (upload.js) and API link
// (the click handler below fetches it and hands over a blob). The top bar names the token and offers sign-out.

import { h, replace } from "./dom.js";

const STORAGE_KEY = "fp8-policy.token";
const ME = "/api/v1/auth/me";

function stored() {
  try {
    return sessionStorage.getItem(STORAGE_KEY);
  } catch (_) {
    return null; // storage disabled: the dashboard works only against an open service
  }
}

export const hasToken = () => Boolean(stored());

export function authHeaders() {
  const token = stored();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// Why the dialog opens: the plain sentence for "no token sent", the service's own words otherwise (revoked, ...).
export function signInReason(error, detail) {
  return error === "TokenRequired" || !detail ? "This service needs an access token." : detail;
}

async function errorDetail(response) {
  try {
    const body = await response.json();
    return signInReason(body.error, typeof body.detail === "string" ? body.detail : "");
  } catch (_) {
    return signInReason(null, "");
  }
}

// ------------------------------------------------------------------------------------------------ sign-in
let dialog = null;

function signInDialog() {
  const input = h("input", {
    id: "signin-token", name: "token", type: "password", autocomplete: "off", spellcheck: "false",
    required: true, placeholder: "fp8p_…", "aria-describedby": "signin-help",
  });
  const reason = h("p", { id: "signin-reason", class: "muted small" });
  const error = h("p", { id: "signin-error", class: "signin-error", role: "alert", hidden: true });
  const submit = h("button", { type: "submit", class: "btn btn-primary", id: "signin-submit" }, "Sign in");
  const form = h("form", { method: "dialog", class: "signin-form" },
    h("h2", { id: "signin-title" }, "Sign in with an access token"),
    reason,
    h("label", { for: "signin-token" }, "Access token"),
    input,
    h("p", { id: "signin-help", class: "muted small" },
      "An admin creates one with ", h("code", null, "fp8-policy token create --name NAME --scope read"),
      ". It is kept for this browser tab only."),
    error,
    h("div", { class: "signin-actions" }, submit));
  const element = h("dialog", { id: "signin-dialog", class: "signin-dialog", "aria-labelledby": "signin-title" }, form);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    submit.disabled = true;
    error.hidden = true;
    try {
      const response = await fetch(ME, { headers: { Accept: "application/json", Authorization: `Bearer ${token}` } });
      if (!response.ok) {
        error.textContent = await errorDetail(response);
        error.hidden = false;
        return;
      }
      sessionStorage.setItem(STORAGE_KEY, token);
      location.reload(); // every view and image starts again, now with the token
    } catch (err) {
      error.textContent = `the service did not answer (${err.message})`;
      error.hidden = false;
    } finally {
      submit.disabled = false;
    }
  });
  document.body.append(element);
  return { element, reason, input };
}

export function askForToken(why) {
  if (!dialog) dialog = signInDialog();
  dialog.reason.textContent = why || "This service needs an access token.";
  if (!dialog.element.open) dialog.element.showModal();
  dialog.input.focus();
}

export function signOut() {
  try {
    sessionStorage.removeItem(STORAGE_KEY);
  } catch (_) {
    /* nothing stored */
  }
  location.reload();
}

// ------------------------------------------------------------------------------------------------ top bar
async function showIdentity(slot) {
  let response;
  try {
    response = await fetch(ME, { headers: { Accept: "application/json", ...authHeaders() } });
  } catch (_) {
    return; // the views report an unreachable service themselves
  }
  if (response.status === 401) {
    askForToken(await errorDetail(response));
    return;
  }
  if (!response.ok) return;
  const me = await response.json();
  if (me.anonymous) return; // an open service: nothing to show
  replace(slot,
    h("span", { class: "topbar-user", id: "signed-in-as", title: `scope: ${me.scope}` },
      h("span", { class: "muted" }, "token "), h("strong", null, me.name), ` · ${me.scope}`),
    h("button", { type: "button", class: "btn btn-small btn-ghost", id: "sign-out", onclick: signOut }, "Sign out"));
}

// Links to the API (metrics CSV, image in a new tab, the run's JSON) cannot carry a header: with a token, fetch
// them here and open or save the result as a blob.
async function openApiLink(anchor) {
  const response = await fetch(anchor.getAttribute("href"), { headers: authHeaders() });
  if (response.status === 401) {
    askForToken(await errorDetail(response));
    return;
  }
  const url = URL.createObjectURL(await response.blob());
  const target = h("a", { href: url, rel: "noopener" });
  if (anchor.hasAttribute("download")) {
    const named = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
    target.download = anchor.getAttribute("download") || (named ? named[1] : "download");
  } else {
    target.target = "_blank";
  }
  document.body.append(target);
  target.click();
  target.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

export function initAuth() {
  const slot = h("div", { class: "topbar-auth", id: "auth-slot" });
  document.querySelector(".topbar")?.append(slot);
  document.addEventListener("click", (event) => {
    const anchor = event.target.closest?.('a[href^="/api/"]');
    if (!anchor || !hasToken() || event.defaultPrevented) return;
    event.preventDefault();
    openApiLink(anchor);
  });
  showIdentity(slot);
}
