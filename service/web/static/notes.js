// The run page's Notes and tags card: the run's description (multi-line text) and its tags, with an Edit button
// for a token that may change them (GET /auth/me: the token that uploaded the run, or an admin token, as
// PATCH /api/v1/runs/{id} allows; an open service's anonymous user is an admin). Saving sends the notes, and the
// tags only when their field was changed: a tag with a comma in it (set through the API) is not split in two by
// an edit of the notes alone. The card shows what the service stored.

import { h, replace, $ } from "./dom.js";
import { API, apiFetch, qs, errorBox } from "./api.js";
import { whoAmI } from "./session.js";
import { chip, card, toast } from "./widgets.js";

/* PATCH's ownership rule (service/runs/ownership.py): the uploading token or an admin token. */
const mayEdit = (me, run) => me.scope === "admin" || (me.scope === "upload" && me.name === run.uploaded_by);

const tagChips = (tags) => tags.map((t) => chip(t, `#/runs${qs({ tag: t })}`));

/* Tags typed in one field: commas or line breaks separate them (the service strips them and drops blanks). */
export function parseTags(text) {
  return text.split(/[,\n]/).map((t) => t.trim()).filter(Boolean);
}

export function notesCard(ctx, run) {
  let current = { notes: run.notes ?? null, tags: [...run.tags] };
  const actions = h("span", { id: "run-notes-actions" });
  const body = h("div", { id: "run-notes-body" });
  const el = card("Notes and tags", { id: "run-notes", actions, subtitle: "What this run was for, as its team wrote it." }, body);

  const show = () => {
    replace(body,
      current.notes
        ? h("p", { class: "run-notes-text", id: "run-notes-text" }, current.notes)
        : h("p", { class: "muted", id: "run-notes-text" }, "No notes yet."),
      h("div", { class: "run-notes-chips", id: "run-notes-tags" },
        current.tags.length ? tagChips(current.tags) : h("span", { class: "muted small" }, "No tags.")));
  };

  const edit = (button) => {
    button.hidden = true;
    const notes = h("textarea", { id: "run-notes-input", rows: 5, "aria-label": "Notes" });
    notes.value = current.notes || "";
    const tags = h("input", { type: "text", id: "run-tags-input", "aria-label": "Tags", placeholder: "nightly, h100" });
    tags.value = current.tags.join(", ");
    const tagsAsShown = tags.value;
    const problem = h("div", { id: "run-notes-error" });
    const save = h("button", { type: "submit", class: "btn btn-primary", id: "run-notes-save" }, "Save");
    const cancel = h("button", { type: "button", class: "btn btn-ghost", id: "run-notes-cancel" }, "Cancel");
    const form = h("form", { class: "run-notes-form", "aria-label": "Edit notes and tags" },
      h("div", { class: "field" }, h("label", { for: "run-notes-input" }, "Notes"), notes),
      h("div", { class: "field" }, h("label", { for: "run-tags-input" }, "Tags (comma-separated)"), tags),
      problem,
      h("div", { class: "form-actions" }, save, cancel));
    cancel.addEventListener("click", () => {
      button.hidden = false;
      show();
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      save.disabled = true;
      try {
        const body = { notes: notes.value };
        if (tags.value !== tagsAsShown) body.tags = parseTags(tags.value);
        const stored = await apiFetch(`${API}/runs/${run.id}`, { method: "PATCH", body, signal: ctx.signal });
        if (!ctx.alive()) return;
        current = { notes: stored.notes, tags: stored.tags };
        const head = $("#run-head-tags");
        if (head) replace(head, tagChips(current.tags));
        button.hidden = false;
        show();
        toast("Notes and tags saved");
      } catch (err) {
        if (err.name === "AbortError") return;
        save.disabled = false;
        replace(problem, errorBox(err, { title: "Not saved" }));
      }
    });
    replace(body, form);
    notes.focus();
  };

  show();
  whoAmI(ctx.signal).then((me) => {
    if (!me || !ctx.alive() || !mayEdit(me, run)) return;
    const button = h("button", { type: "button", class: "btn", id: "run-notes-edit" }, "Edit");
    button.addEventListener("click", () => edit(button));
    replace(actions, button);
  });
  return el;
}
