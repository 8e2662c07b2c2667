// The comparison view's "Promote" buttons: each row's form is sent as JSON to the promotion
// endpoint (POST <prefix>/api/promote/<dag_id>/<run_id>), with the UI's session cookie, and the
// answer is shown in the row. The endpoint takes JSON only (a cross-site form cannot send it).
"use strict";
document.addEventListener("submit", async (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.classList.contains("promote")) return;
  event.preventDefault();
  const button = form.querySelector("button");
  const field = (name) => form.elements.namedItem(name).value;
  const label = `${field("task_id")} map index ${field("map_index")}`;
  if (!window.confirm(`Promote ${field("torchx_run_id")} (${label})?`)) return;
  button.disabled = true;
  let text;
  try {
    const reply = await fetch(form.action, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ task_id: field("task_id"), map_index: Number(field("map_index")) }),
    });
    const body = await reply.json().catch(() => ({}));
    if (reply.ok) {
      text = body.created ? "Promoted" : "Already promoted";
    } else {
      text = `Refused (${reply.status}): ${body.detail || reply.statusText}`;
      button.disabled = false;
    }
  } catch (error) {
    text = `Not sent: ${error}`;
    button.disabled = false;
  }
  let note = form.querySelector(".promote-result");
  if (!note) {
    note = document.createElement("span");
    note.className = "promote-result";
    form.append(note);
  }
  note.textContent = text;
});
