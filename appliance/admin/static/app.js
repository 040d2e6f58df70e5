"use strict";
// The dashboard: polls the device's own API and redraws. Text from turns is never parsed as HTML.
let session = null;
let timer = null;

class LoggedOut extends Error {
  constructor(code) { super(code); this.code = code; }
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (options.method && options.method !== "GET" && session) headers["X-CSRF-Token"] = session.csrf_token;
  const response = await fetch(path, Object.assign({}, options, {headers, credentials: "same-origin"}));
  if (response.status === 401) {
    const reason = await response.json().catch(() => null);
    throw new LoggedOut(reason && reason.error);
  }
  const body = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok && response.status !== 503) {
    const error = new Error((body && body.message) || `${path}: HTTP ${response.status}`);
    error.body = body;
    throw error;
  }
  return body;
}

function text(id, value) { document.getElementById(id).textContent = value; }

function cell(row, value, className) {
  const td = document.createElement("td");
  td.textContent = value == null ? "–" : String(value);
  if (className) td.className = className;
  row.append(td);
  return td;
}

function fillTable(id, items, addCells) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren();
  for (const item of items) {
    const row = document.createElement("tr");
    addCells(row, item);
    body.append(row);
  }
  if (!items.length) {
    const row = document.createElement("tr");
    const td = cell(row, "none");
    td.colSpan = document.querySelectorAll(`#${id} thead th`).length;
    td.className = "muted";
    body.append(row);
  }
}

function bytes(n) {
  if (n == null) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function duration(seconds) {
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${h}h ${m}m` : h ? `${h}h ${m}m` : `${m}m ${s % 60}s`;
}

function showStatus(status) {
  text("site-name", status.site_name);
  text("device-id", `${status.device_id} · version ${status.version}`);
  text("certificate", status.certificate ? ` · certificate ${status.certificate}` : " · plain HTTP");
  const health = document.getElementById("health");
  health.textContent = status.ready ? "healthy · ready" : "running · engines not ready";
  health.className = `badge ${status.ready ? "ok" : "bad"}`;
  const notice = document.getElementById("notice");
  notice.hidden = !status.notice;
  notice.textContent = status.notice || "";
  const host = status.host;
  text("uptime", duration(status.uptime_s));
  text("cpu", `${host.cpu_percent.toFixed(0)} % of ${host.cpu_count} · load ${host.load_avg_1m}`);
  text("memory", `${bytes(host.memory_used_bytes)} / ${bytes(host.memory_total_bytes)}`);
  text("disk", `${host.disk_percent.toFixed(0)} % of ${bytes(host.disk_total_bytes)}`);
  const temps = Object.values(host.temperatures_c);
  text("temperature", temps.length ? `${Math.max(...temps).toFixed(0)} °C max` : "no sensor");
  text("gpu", host.gpus.length
    ? host.gpus.map((g) => `${g.utilization_percent ?? "?"} %${g.temperature_c != null ? ` · ${g.temperature_c} °C` : ""}`).join(", ")
    : "none");
  const llm = status.llm;
  const load = document.getElementById("llm-load");
  load.textContent = llm
    ? `${llm.answering} of ${llm.slots} answering · ${llm.waiting} waiting`
      + (llm.mean_batch ? ` · ${llm.mean_batch} per step` : "")
    : "not loaded";
  load.className = llm && llm.waiting > llm.max_queue ? "over" : "";
  const registration = status.sip_registration;
  const extension = document.getElementById("sip-registration");
  extension.textContent = registration
    ? `${registration.state} · ${registration.user}@${registration.registrar}`
      + (registration.auth && registration.auth !== "none" ? ` · ${registration.auth}` : "")
      + (registration.detail ? ` · ${registration.detail}` : "")
    : "not registering (sip.registrar)";
  extension.className = registration && registration.state === "failing" ? "over" : "";
  fillTable("engines-table", status.engines, (row, e) => {
    cell(row, e.name); cell(row, e.backend); cell(row, e.model); cell(row, e.runtime_version);
    cell(row, e.error ? `error: ${e.error}` : e.loaded && e.warm ? "ready" : e.loaded ? "warming up" : "not loaded",
      e.error || !(e.loaded && e.warm) ? "over" : "");
  });
  const version = status.bundle.version
    ? `version ${status.bundle.version}${status.bundle.label ? ` (${status.bundle.label})` : ""} · `
    : "";
  text("bundle-path", status.bundle.error || `${version}${status.bundle.path} · ${bytes(status.bundle.total_bytes)}`);
  fillTable("bundle-table", status.bundle.artifacts, (row, a) => {
    cell(row, a.name); cell(row, a.kind); cell(row, bytes(a.size_bytes), "num"); cell(row, a.sha256_prefix);
  });
}

const QUALITY_SIGNALS = ["unsure", "repeated", "barge_in", "tool_failed", "fallback", "empty"];

function showQuality(quality, running) {
  fillTable("quality-table", quality, (row, q) => {
    cell(row, `${q.version || "unversioned"}${q.version === (running || "") ? " (running)" : ""}`);
    cell(row, q.turns, "num");
    cell(row, q.avg_logprob == null ? "–" : q.avg_logprob.toFixed(2), q.avg_logprob != null && q.avg_logprob < -1 ? "num over" : "num");
    for (const signal of QUALITY_SIGNALS) {
      const count = q.signals[signal] || 0;
      const share = q.turns ? count / q.turns : 0;
      cell(row, count ? `${count} (${Math.round(share * 100)} %)` : "0", share >= 0.2 ? "num over" : "num");
    }
  });
}

const ENDED_BY = {
  smart_turn: "sounded finished", fused: "sound and words finished", text: "words finished",
  silence: "silence", incomplete_silence: "long silence", max_length: "too long", stream_end: "audio ended",
  keypad: "typed on the keypad", operator_key: "operator key", silence_prompt: "asked whether anyone is there",
  transfer_failed: "transfer failed", greeting: "greeting",
};

const OUTCOMES = {
  answered: "ok", interrupted: "interrupted", hangup: "caller hung up", stopped: "stopped by shutdown",
  error: "error",
};

function endOfTurn(t) {
  const how = ENDED_BY[t.endpoint_by] || t.endpoint_by || "–";
  const wait = t.endpoint_wait_ms == null ? "" : `${Math.round(t.endpoint_wait_ms)} ms · `;
  const unfinished = t.turn_incomplete ? ` · ${t.turn_incomplete}× unfinished` : "";
  const verdicts = [["sound", t.turn_complete_p], ["words", t.words_complete_p]]
    .filter(([, p]) => p != null).map(([judge, p]) => `${judge} ${p.toFixed(2)}`).join(", ");
  return `${wait}${how}${unfinished}${verdicts ? ` (${verdicts})` : ""}`;
}

const WITHHELD = {
  figure: "a figure no source gave",
  off_subject: "a figure about something not asked",
  internal: "an instruction to the model",
};

const OVERLAPS = {
  backchannel: "went on",
  stop_word: "stopped",
  interruption: "interrupted",
};

function replyShown(t) {
  const said = t.played_reply || t.reply;
  const over = (t.overlaps || []).map((o) =>
    `over it at ${o.at_s.toFixed(1)} s: ${o.heard ? `"${o.heard}"` : "a sound"} (${OVERLAPS[o.kind] || o.kind}` +
    `${o.kind === "backchannel" ? ` after ${Math.round(o.decided_ms)} ms` : ""}` +
    `${o.by_linear_ear ? ", heard through the echo" : ""})`);
  const notSaid = (t.withheld || []).map((w) =>
    `not said: ${w.figures.length ? w.figures.join(", ") : "a clause"} (${WITHHELD[w.why] || w.why})`);
  const facts = (t.facts_given || []).length ? [`facts: ${t.facts_given.slice(0, 3).join(", ")}`] : [];
  const heardAs = (t.heard_as || []).length ? [`heard as the site's words: ${t.heard_as.join(", ")}`] : [];
  const declined = t.declined && !notSaid.length ? ["declined"] : [];
  const woke = t.opened_by === "wake_word" ? ["after the wake word"] : t.opened_by === "follow_up" ? ["a follow-up"] : [];
  return [said, ...over, ...notSaid, ...declined, ...facts, ...heardAs, ...woke].join(" · ");
}

function showLatency(report, turns) {
  text("over-budget", `${report.over_budget} of ${report.turns}`);
  text("turn-incomplete", report.turn_checks
    ? `${report.turn_incomplete} of ${report.turn_checks} checks` : "no checks");
  fillTable("stage-table", report.stages, (row, s) => {
    cell(row, s.stage); cell(row, s.count, "num"); cell(row, s.p50_ms, "num");
    cell(row, s.p95_ms, s.p95_over_budget ? "num over" : "num"); cell(row, s.p99_ms, "num");
    cell(row, s.max_ms, "num"); cell(row, s.budget_ms, "num");
  });
  drawLatencyPlot(document.getElementById("latency-plot"), document.getElementById("plot-legend"),
    turns.slice().reverse(), report.budget_ms);
  fillTable("turns-table", turns.slice(0, 25), (row, t) => {
    if (t.over_budget) row.className = "over";
    row.dataset.turnId = t.turn_id;
    cell(row, new Date(t.wall_time * 1000).toLocaleTimeString());
    cell(row, t.session_id); cell(row, t.transcript); cell(row, replyShown(t));
    cell(row, t.turn_latency_ms, t.over_budget ? "num over" : "num");
    cell(row, endOfTurn(t));
    const outcome = t.error ? `error: ${t.error}` : (OUTCOMES[t.outcome] || t.outcome);
    cell(row, t.llm_backend ? `${outcome} · ${t.llm_backend}` : outcome);
  });
}

function showSessions(sessions) {
  text("session-count", String(sessions.length));
  fillTable("sessions-table", sessions, (row, s) => {
    cell(row, s.session_id); cell(row, s.kind); cell(row, s.peer);
    cell(row, s.wakes ? `${s.state} · woken ${s.wakes}×` : s.state); cell(row, s.heard || "");
    cell(row, s.turns, "num");
  });
}

function showConfig(config) {
  text("config-source", `${config.path || "shipped default (read-only)"} · applied without restart: ${config.live_keys.join(", ")}`
    + (config.environment_overrides.length ? ` · set by environment: ${config.environment_overrides.join(", ")}` : ""));
  text("config-view", JSON.stringify(config.settings, null, 2));
}

async function refresh() {
  try {
    const [status, sessions, latency, turns] = await Promise.all([
      api("/api/status"), api("/api/sessions"), api("/api/latency?limit=200"), api("/api/turns?limit=100"),
    ]);
    showStatus(status);
    showSessions(sessions);
    showLatency(latency, turns);
    showQuality(latency.quality, status.bundle.version);
    text("updated", new Date().toLocaleTimeString());
  } catch (err) {
    if (err instanceof LoggedOut) {
      location.assign(err.code === "account_changed" ? "/login?ended=account_changed" : "/login");
      return;
    }
    const health = document.getElementById("health");
    health.textContent = `unreachable: ${err.message}`;
    health.className = "badge bad";
  }
}

async function start() {
  try {
    session = await api("/api/session");
  } catch (err) {
    location.assign("/login");
    return;
  }
  text("whoami", `${session.username} (${session.role})`);
  text("refresh", String(session.refresh_s));
  document.getElementById("logout").addEventListener("click", async () => {
    try { await api("/api/logout", {method: "POST"}); } catch (err) { /* logged out anyway */ }
    location.assign("/login");
  });
  await startPanel();
  await refresh();
  timer = setInterval(refresh, session.refresh_s * 1000);
}

start();
