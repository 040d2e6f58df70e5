"use strict";
// The control panel: one form per section of the settings, drawn from GET /api/config/schema (each
// setting's description, unit, bounds, choices and default), validated by the device with the same
// messages as `appliance config check`; the site's facts files, a question tried, the restart button.
// Text from the device is never parsed as HTML.

function element(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "text") node.textContent = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (value !== undefined && value !== null) node[name] = value;
  }
  node.append(...children);
  return node;
}

function shown(value) {
  if (value === null || value === undefined) return "unset";
  return typeof value === "string" ? value || '""' : JSON.stringify(value);
}

function bounds(field) {
  const parts = [];
  if (field.minimum != null) parts.push(`${field.exclusive_minimum ? ">" : "≥"} ${field.minimum}`);
  if (field.maximum != null) parts.push(`${field.exclusive_maximum ? "<" : "≤"} ${field.maximum}`);
  if (field.max_length != null) parts.push(`at most ${field.max_length} characters`);
  return parts.join(", ");
}

function settingInput(field, value, editable) {
  const id = `setting-${field.key}`;
  let input;
  if (field.kind === "boolean") {
    input = element("input", {type: "checkbox", id, checked: Boolean(value)});
  } else if (field.kind === "choice") {
    input = element("select", {id});
    for (const [i, choice] of field.choices.entries()) {
      input.append(element("option", {value: String(i), text: String(choice), selected: choice === value}));
    }
  } else if (field.kind === "json") {
    input = element("textarea", {id, value: JSON.stringify(value, null, 1)});
  } else if (field.kind === "integer" || field.kind === "number") {
    input = element("input", {type: "number", id, value: value == null ? "" : String(value),
      step: field.kind === "integer" ? "1" : "any"});
    if (field.minimum != null) input.min = String(field.minimum);
    if (field.maximum != null) input.max = String(field.maximum);
  } else {
    input = element("input", {type: "text", id, value: value == null ? "" : String(value)});
    if (field.max_length != null) input.maxLength = field.max_length;
  }
  input.disabled = !editable;
  input.dataset.key = field.key;
  return input;
}

// The value the form holds, as PUT /api/config takes it; throws naming the setting when it is not one.
function formValue(field, input) {
  if (field.kind === "boolean") return input.checked;
  if (field.kind === "choice") return field.choices[Number(input.value)];
  const raw = input.value;
  if (raw.trim() === "" && field.nullable) return null;
  if (field.kind === "json") {
    try { return JSON.parse(raw); } catch { throw new Error(`${field.key}: not JSON`); }
  }
  if (field.kind === "integer" || field.kind === "number") {
    const number = Number(raw);
    if (raw.trim() === "" || Number.isNaN(number)) throw new Error(`${field.key}: not a number`);
    return number;
  }
  return raw;
}

function same(a, b) { return JSON.stringify(a) === JSON.stringify(b); }

function sectionForm(section, values, editable) {
  const rows = [];
  for (const field of section.fields) {
    const name = field.key.split(".")[1];
    const input = settingInput(field, values[name], editable);
    const facts = [field.unit, bounds(field), `default ${shown(field.default)}`,
      field.live ? "applies at once" : "applies after a restart"].filter(Boolean).join(" · ");
    rows.push(element("div", {className: "setting", dataset: {key: field.key}}, [
      element("label", {htmlFor: input.id, text: name}),
      input,
      element("div", {className: "about"}, [
        element("div", {text: field.description}),
        element("div", {className: "muted", text: facts}),
      ]),
    ]));
  }
  const result = element("p", {className: "result", role: "status"});
  const save = element("button", {type: "submit", text: `Save ${section.name}`, hidden: !editable});
  // The device checks (noValidate): the messages are those of `appliance config check`.
  const form = element("form", {className: "section-form", noValidate: true, dataset: {section: section.name}},
    [...rows, save, result]);
  form.addEventListener("submit", (event) => saveSection(event, section, values, form, result));
  return element("details", {className: "setting-section"}, [
    element("summary", {text: `[${section.name}] ${section.description.split("\n")[0]}`}),
    form,
  ]);
}

function markProblems(form, problems) {
  for (const row of form.querySelectorAll(".setting")) {
    row.classList.remove("problem");
    row.querySelector(".message")?.remove();
  }
  for (const problem of problems) {
    const row = form.querySelector(`.setting[data-key="${CSS.escape(problem.key)}"]`);
    if (!row) continue;
    row.classList.add("problem");
    row.append(element("div", {className: "message", text: problem.message}));
  }
}

async function saveSection(event, section, values, form, result) {
  event.preventDefault();
  const changes = {};
  try {
    for (const field of section.fields) {
      const name = field.key.split(".")[1];
      const input = form.querySelector(`[data-key="${CSS.escape(field.key)}"]:is(input, select, textarea)`);
      const value = formValue(field, input);
      if (!same(value, values[name])) changes[name] = value;
    }
  } catch (err) {
    result.className = "result error";
    result.textContent = err.message;
    return;
  }
  if (!Object.keys(changes).length) {
    result.className = "result";
    result.textContent = "No change.";
    return;
  }
  try {
    const answer = await api("/api/config", {
      method: "PUT",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({changes: {[section.name]: changes}}),
    });
    markProblems(form, []);
    result.className = "result";
    result.textContent = `Saved ${answer.changed.join(", ") || "nothing"}. In effect now: ${answer.applied.join(", ") || "none"}; `
      + `after a restart: ${answer.restart_required.join(", ") || "none"}.`;
    if (answer.restart_required.length) askForRestart(`${answer.restart_required.join(", ")} wait for a restart.`);
    Object.assign(values, changes);  // what the file holds now: the next save compares with it
    showConfig(await api("/api/config"));
  } catch (err) {
    markProblems(form, (err.body && err.body.problems) || []);
    result.className = "result error";
    result.textContent = err.message;
  }
}

function askForRestart(why) {
  text("restart-text", why);
  document.getElementById("restart-bar").hidden = false;
}

async function restartNow() {
  const button = document.getElementById("restart");
  button.disabled = true;
  try {
    const answer = await api("/api/restart", {method: "POST"});
    text("restart-text", `Restarting: ${answer.message}.`);
  } catch (err) {
    text("restart-text", err.message);
    button.disabled = false;
  }
}

function factsForm(file, editable) {
  const area = element("textarea", {value: file.text, disabled: !editable, spellcheck: true});
  area.setAttribute("aria-label", `facts of ${file.tool}`);
  const result = element("p", {className: "result", role: "status",
    text: file.problem || `${file.sections} entries`});
  if (file.problem) result.className = "result error";
  const save = element("button", {type: "submit", text: "Save facts", hidden: !editable});
  const form = element("form", {className: "facts-file", dataset: {tool: file.tool}}, [
    element("h3", {text: `${file.tool}: ${file.path}`}), area, save, result,
  ]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const saved = await api(`/api/facts/${encodeURIComponent(file.tool)}`, {
        method: "PUT",
        headers: {"Content-Type": "application/json"},
        body: JSON.stringify({text: area.value}),
      });
      result.className = "result";
      result.textContent = `Saved: ${saved.sections} entries` + (saved.backup ? ` (the file before: ${saved.backup})` : "")
        + "; in service after a restart.";
      askForRestart("Saved facts are in service after a restart.");
    } catch (err) {
      result.className = "result error";
      result.textContent = err.message;
    }
  });
  return form;
}

async function tryQuestion(event) {
  event.preventDefault();
  const result = document.getElementById("try-result");
  result.className = "";
  result.textContent = "asking…";
  try {
    const answer = await api("/api/facts/try", {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({question: document.getElementById("try-question").value}),
    });
    const how = answer.declined ? "declined" : answer.chosen.length ? `chose entry ${answer.chosen.join(", ")}` : "answered";
    result.textContent = `“${answer.said}” (${how}${answer.why ? `: ${answer.why}` : ""}; ${answer.seconds.toFixed(2)} s)`;
  } catch (err) {
    result.className = "error";
    result.textContent = err.message;
  }
}

async function loadPanel() {
  const editable = session.role === "admin";
  const [config, schema, facts] = await Promise.all([api("/api/config"), api("/api/config/schema"), api("/api/facts")]);
  showConfig(config);
  const open = new Set([...document.querySelectorAll("#config-panel details[open]")].map((d) => d.dataset.section));
  const panel = document.getElementById("config-panel");
  panel.replaceChildren(...schema.map((section) => {
    const details = sectionForm(section, config.settings[section.name] || {}, editable && config.writable);
    details.dataset.section = section.name;
    details.open = open.has(section.name);
    return details;
  }));
  document.getElementById("facts-panel").replaceChildren(...facts.map((file) => factsForm(file, editable)));
  document.getElementById("try-form").hidden = !editable;
}

function startPanel() {
  document.getElementById("restart").addEventListener("click", restartNow);
  document.getElementById("try-form").addEventListener("submit", tryQuestion);
  return loadPanel();
}
