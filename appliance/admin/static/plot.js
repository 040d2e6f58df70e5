"use strict";
// A small SVG line plot of stage durations over recent turns (no library).
const PLOT_STAGES = [
  ["endpoint_wait", "#8c959f"],
  ["asr", "#1f6feb"],
  ["llm_first_token", "#8250df"],
  ["first_clause", "#bf8700"],
  ["tts_first_audio", "#1a7f37"],
  ["turn_latency", "#cf222e"],
];
const SVG_NS = "http://www.w3.org/2000/svg";

function svgElement(name, attributes, text) {
  const element = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  if (text !== undefined) element.textContent = text;
  return element;
}

function niceCeiling(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function formatMs(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${Number((ms / 1000).toFixed(2))} s`;
}

// turns: oldest first, each {turn_id, stages_ms, over_budget}; budgetMs: the turn latency budget.
function drawLatencyPlot(svg, legend, turns, budgetMs) {
  const width = Math.max(svg.clientWidth || 800, 300);
  const height = Math.max(svg.clientHeight || 320, 160);
  const pad = {left: 56, right: 16, top: 12, bottom: 28};
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.replaceChildren();
  let maxMs = budgetMs;
  for (const turn of turns) {
    for (const [stage] of PLOT_STAGES) {
      const value = turn.stages_ms[stage];
      if (value != null && value > maxMs) maxMs = value;
    }
  }
  const top = niceCeiling(maxMs * 1.05);
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const x = (i) => pad.left + (turns.length <= 1 ? plotW / 2 : (i * plotW) / (turns.length - 1));
  const y = (ms) => pad.top + plotH - (ms / top) * plotH;

  for (let k = 0; k <= 4; k++) {
    const ms = (top * k) / 4;
    svg.append(svgElement("line", {class: "grid", x1: pad.left, x2: width - pad.right, y1: y(ms), y2: y(ms)}));
    svg.append(svgElement("text", {x: pad.left - 6, y: y(ms) + 4, "text-anchor": "end"}, formatMs(ms)));
  }
  svg.append(svgElement("line", {class: "axis", x1: pad.left, x2: pad.left, y1: pad.top, y2: pad.top + plotH}));
  svg.append(svgElement("line", {class: "axis", x1: pad.left, x2: width - pad.right, y1: pad.top + plotH, y2: pad.top + plotH}));
  svg.append(svgElement("text", {x: pad.left, y: height - 8}, turns.length ? "older" : "no turns yet"));
  svg.append(svgElement("text", {x: width - pad.right, y: height - 8, "text-anchor": "end"}, turns.length ? "newest" : ""));

  turns.forEach((turn, i) => {
    if (turn.over_budget) {
      const band = Math.min(Math.max(plotW / Math.max(turns.length, 1), 4), 24);
      svg.append(svgElement("rect", {x: x(i) - band / 2, y: pad.top, width: band, height: plotH, fill: "#ffebe9", class: "over-band"}));
    }
  });
  svg.append(svgElement("line", {class: "budget", x1: pad.left, x2: width - pad.right, y1: y(budgetMs), y2: y(budgetMs)}));
  svg.append(svgElement("text", {x: width - pad.right - 4, y: y(budgetMs) - 4, "text-anchor": "end"}, `budget ${budgetMs} ms`));

  legend.replaceChildren();
  for (const [stage, color] of PLOT_STAGES) {
    const points = [];
    turns.forEach((turn, i) => {
      const value = turn.stages_ms[stage];
      if (value != null) points.push([x(i), y(value), turn]);
    });
    if (!points.length) continue;
    const path = svgElement("polyline", {
      points: points.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(" "),
      fill: "none", stroke: color, "stroke-width": stage === "turn_latency" ? 2.5 : 1.5,
      "data-stage": stage, class: "stage-line",
    });
    svg.append(path);
    for (const [px, py, turn] of points) {
      const over = stage === "turn_latency" && turn.over_budget;
      const dot = svgElement("circle", {cx: px, cy: py, r: over ? 4.5 : 2.5, fill: over ? "#cf222e" : color, class: over ? "over-mark" : "point"});
      dot.append(svgElement("title", {}, `${stage}: ${turn.stages_ms[stage]} ms (turn ${turn.turn_id})`));
      svg.append(dot);
    }
    const item = document.createElement("span");
    item.style.setProperty("--swatch", color);
    item.textContent = stage;
    legend.append(item);
  }
}
