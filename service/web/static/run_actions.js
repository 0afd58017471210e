// The run page's Retry and Delete buttons, shown only to a token that may use them (GET /auth/me: `upload` or
// `admin` retries a failed run's ingest from its stored upload, POST .../retry; `admin` deletes, DELETE .../runs/id).
// Delete asks once more on the button itself ("Confirm delete", 4 s) as the runs list does.

import { h, replace } from "./dom.js";
import { API, apiFetch, errorBox } from "./api.js";
import { whoAmI } from "./session.js";
import { go, route } from "./router.js";
import { toast } from "./widgets.js";
import { runLabel } from "./format.js";

const MAY_RETRY = new Set(["upload", "admin"]);

/* A slot for the buttons, filled once the token's scope is known (empty for a read-only token). */
export function runActions(ctx, run) {
  const slot = h("span", { class: "run-actions", id: "run-actions" });
  const problem = h("div", { id: "run-action-error" });
  whoAmI(ctx.signal).then((me) => {
    if (!me || !ctx.alive()) return;
    const buttons = [];
    if (run.status === "failed" && MAY_RETRY.has(me.scope)) buttons.push(retryButton(ctx, run, problem));
    if (me.scope === "admin") buttons.push(deleteButton(ctx, run, problem));
    replace(slot, ...buttons);
  });
  return { slot, problem };
}

function retryButton(ctx, run, problem) {
  const button = h("button", { type: "button", class: "btn", id: "run-retry" }, "Retry ingest");
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await apiFetch(`${API}/runs/${run.id}/retry`, { method: "POST", as: "response", signal: ctx.signal });
      toast(`Ingest of ${runLabel(run)} queued again`);
      route(); // the page follows the run: queued, processing, ready or failed again
    } catch (err) {
      if (err.name === "AbortError") return;
      button.disabled = false;
      replace(problem, errorBox(err, { title: "Retry failed" }));
    }
  });
  return button;
}

function deleteButton(ctx, run, problem) {
  const button = h("button", { type: "button", class: "btn btn-danger", id: "run-delete" }, "Delete");
  return armDelete(ctx, button, run, () => go("/runs"), (err) => replace(problem, errorBox(err, { title: "Delete failed" })));
}

/** A Delete button that arms on the first click ("Confirm delete" for 4 s) and deletes the run on the second;
 * `onDeleted()` after the toast, `onError(err)` when the request failed (the button is enabled again). Shared by
 * the run page and the runs list. */
export function armDelete(ctx, button, run, onDeleted, onError) {
  let armed = false;
  button.addEventListener("click", async () => {
    if (!armed) { // first click arms, the second deletes
      armed = true;
      button.textContent = "Confirm delete";
      button.classList.add("armed");
      ctx.later(() => {
        armed = false;
        button.textContent = "Delete";
        button.classList.remove("armed");
      }, 4000);
      return;
    }
    button.disabled = true;
    try {
      await apiFetch(`${API}/runs/${run.id}`, { method: "DELETE", as: "response", signal: ctx.signal });
      toast(`Deleted ${runLabel(run)} (#${run.id})`);
      onDeleted();
    } catch (err) {
      if (err.name === "AbortError") return;
      button.disabled = false;
      onError(err);
    }
  });
  return button;
}
