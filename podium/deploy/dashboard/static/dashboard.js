// The live tournament page: polls api/state every 2 s and redraws the tables and the two SVG charts.
// No framework and nothing from the internet. Data goes into the page as text (textContent), never as HTML.
"use strict";

const POLL_MS = 2000;
const TIMEOUT_MS = 5000;
const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#2f6fdf", "#e0762f", "#1f9d55", "#9b4dca", "#c62f3b", "#0f9fb0", "#8a6d3b", "#5c6270"];

let selectedPod = null; // the pod whose curve is shown; null: the champion
let lastGood = null; // when the last poll succeeded
let knownHistory = null; // ids of the results already shown (to highlight new ones)
let lastState = null; // the last state the server sent
const algoColours = new Map();

// ----------------------------------------------------------------- formatting
function fmtNumber(x, digits = 1) {
  return x === null || x === undefined ? "–" : x.toFixed(digits);
}
function fmtScore(mean, std) {
  if (mean === null || mean === undefined) return "–";
  return std === null || std === undefined ? fmtNumber(mean) : `${fmtNumber(mean)} ± ${fmtNumber(std)}`;
}
function fmtInt(n) {
  return n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US");
}
function fmtDuration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (h) return `${h} h ${String(m).padStart(2, "0")} min`;
  if (m) return `${m} min ${String(sec).padStart(2, "0")} s`;
  return `${sec} s`;
}
function fmtHparams(hparams) {
  return Object.entries(hparams || {})
    .map(([k, v]) => `${k} = ${typeof v === "number" ? +v.toPrecision(3) : JSON.stringify(v)}`)
    .join("\n");
}
function fmtTime(date) {
  return date.toLocaleTimeString("en-GB");
}
function colourOf(algo) {
  if (!algoColours.has(algo)) algoColours.set(algo, PALETTE[algoColours.size % PALETTE.length]);
  return algoColours.get(algo);
}

// ----------------------------------------------------------------- DOM helpers
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}
function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}
function byId(id) {
  return document.getElementById(id);
}

// Fill the body of table `id`: `cells(row)` gives [text or node, class] pairs; rows with a pod are clickable;
// `title(row)`, if given, is the row's tooltip.
function fillTable(id, rows, cells, empty, title) {
  const body = byId(id).tBodies[0];
  const columns = byId(id).tHead.rows[0].cells.length;
  const fresh = rows.map((row) => {
    const tr = el("tr");
    if (row.pod_id) {
      tr.dataset.pod = row.pod_id;
      if (row.pod_id === (selectedPod || null)) tr.classList.add("selected");
    }
    if (title) tr.title = title(row);
    for (const [value, cls] of cells(row)) tr.append(el("td", cls ? { class: cls } : {}, value));
    return tr;
  });
  if (!fresh.length) fresh.push(el("tr", {}, el("td", { class: "muted", colspan: String(columns) }, empty)));
  body.replaceChildren(...fresh);
}

// ----------------------------------------------------------------- charts
function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) {
    const pad = Math.abs(lo) * 0.1 || 1;
    lo -= pad;
    hi += pad;
  }
  const raw = (hi - lo) / count;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => raw <= s);
  const start = Math.floor(lo / step) * step, stop = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let t = start; t <= stop + step / 2; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}
function tickLabel(value) {
  const a = Math.abs(value);
  if (a >= 1e6) return `${+(value / 1e6).toFixed(2)}M`;
  if (a >= 1e4) return `${+(value / 1e3).toFixed(1)}k`;
  return String(+value.toFixed(2));
}

// Draw `series` into the SVG: each {kind: "line"|"step"|"dots"|"band", points: [[x, y(, y2)]], colour, label}.
function drawChart(svg, { series, xLabel, yLabel, target, emptyText }) {
  const W = 640, H = 280, left = 56, right = 14, top = 24, bottom = 40;
  svg.replaceChildren();
  const all = series.flatMap((s) => s.points);
  if (!all.length) {
    svg.append(svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty-note" }, emptyText));
    return;
  }
  const xs = all.map((p) => p[0]);
  const ys = all.flatMap((p) => (p.length > 2 ? [p[1], p[2]] : [p[1]]));
  if (target !== null && target !== undefined) ys.push(target);
  const xTicks = niceTicks(Math.min(0, ...xs), Math.max(...xs));
  const yTicks = niceTicks(Math.min(...ys), Math.max(...ys));
  const [x0, x1] = [xTicks[0], xTicks[xTicks.length - 1]];
  const [y0, y1] = [yTicks[0], yTicks[yTicks.length - 1]];
  const X = (x) => left + ((x - x0) / (x1 - x0 || 1)) * (W - left - right);
  const Y = (y) => H - bottom - ((y - y0) / (y1 - y0 || 1)) * (H - top - bottom);
  for (const t of yTicks) {
    svg.append(svgEl("line", { x1: left, x2: W - right, y1: Y(t), y2: Y(t), class: "grid" }));
    svg.append(svgEl("text", { x: left - 6, y: Y(t) + 4, "text-anchor": "end" }, tickLabel(t)));
  }
  for (const t of xTicks) {
    svg.append(svgEl("text", { x: X(t), y: H - bottom + 15, "text-anchor": "middle" }, tickLabel(t)));
  }
  svg.append(svgEl("line", { x1: left, x2: W - right, y1: H - bottom, y2: H - bottom, class: "axis" }));
  svg.append(svgEl("line", { x1: left, x2: left, y1: top, y2: H - bottom, class: "axis" }));
  svg.append(svgEl("text", { x: (left + W - right) / 2, y: H - 6, "text-anchor": "middle" }, xLabel));
  svg.append(svgEl("text", { x: 12, y: (top + H - bottom) / 2, "text-anchor": "middle",
    transform: `rotate(-90 12 ${(top + H - bottom) / 2})` }, yLabel));
  if (target !== null && target !== undefined) {
    svg.append(svgEl("line", { x1: left, x2: W - right, y1: Y(target), y2: Y(target), class: "target" }));
    svg.append(svgEl("text", { x: W - right - 4, y: Y(target) - 4, "text-anchor": "end" }, `target ${target}`));
  }
  for (const s of series) {
    if (!s.points.length) continue;
    if (s.kind === "band") {
      const upper = s.points.map((p) => `${X(p[0])},${Y(p[2])}`);
      const lower = s.points.map((p) => `${X(p[0])},${Y(p[1])}`).reverse();
      svg.append(svgEl("polygon", { points: [...upper, ...lower].join(" "), fill: s.colour, opacity: 0.15 }));
    } else if (s.kind === "dots") {
      const group = svgEl("g", { fill: s.colour, opacity: 0.75 });
      for (const p of s.points) {
        const dot = svgEl("circle", { cx: X(p[0]), cy: Y(p[1]), r: 3.2 });
        if (p[3]) dot.append(svgEl("title", {}, `${p[3]}: ${fmtNumber(p[1])} at ${fmtDuration(p[0])}`));
        group.append(dot);
      }
      svg.append(group);
    } else {
      let d = "";
      s.points.forEach((p, i) => {
        if (i === 0) d += `M${X(p[0])},${Y(p[1])}`;
        else if (s.kind === "step") d += `H${X(p[0])}V${Y(p[1])}`;
        else d += `L${X(p[0])},${Y(p[1])}`;
      });
      if (s.kind === "step" && s.until !== undefined) d += `H${X(Math.max(s.until, s.points[s.points.length - 1][0]))}`;
      svg.append(svgEl("path", { d, fill: "none", stroke: s.colour, "stroke-width": s.width || 2 }));
      if (s.markers) {
        for (const p of s.points) svg.append(svgEl("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.5, fill: s.colour }));
      }
    }
  }
  let lx = left + 8;
  for (const s of series.filter((s) => s.label)) {
    svg.append(svgEl("rect", { x: lx, y: 6, width: 10, height: 10, fill: s.colour, rx: 2 }));
    const label = svgEl("text", { x: lx + 14, y: 15 }, s.label);
    svg.append(label);
    lx += 22 + 6.5 * s.label.length;
  }
}

function drawProgress(state) {
  const t = state.tournament;
  const results = state.progress.results;
  const algos = [...new Set(results.map((r) => r[2]))].sort();
  const series = algos.map((algo) => ({
    kind: "dots",
    colour: colourOf(algo),
    label: algo,
    points: results.filter((r) => r[2] === algo).map((r) => [r[0], r[1], null, r[3]]),
  }));
  series.push({ kind: "step", colour: "#1d2330", label: "leaderboard best", points: state.progress.best,
    until: t ? t.elapsed : undefined });
  drawChart(byId("progress-chart"), {
    series,
    xLabel: "tournament seconds",
    yLabel: "evaluation return",
    target: t ? t.target : null,
    emptyText: "no results yet: the first pod's score appears here when it reports",
  });
}

let curveRequests = 0; // the newest drawCurve call draws: an older answer that arrives later is dropped

async function drawCurve(state) {
  const request = ++curveRequests;
  const pod = selectedPod || state.champion || (state.pool[0] && state.pool[0].pod_id);
  byId("curve-reset").hidden = !selectedPod;
  if (!pod) {
    byId("curve-title").textContent = "Learning curve";
    drawChart(byId("curve-chart"), { series: [], emptyText: "no pod has been evaluated yet" });
    return;
  }
  const response = await fetch(`api/curve/${encodeURIComponent(pod)}?lineage=true`, { cache: "no-store",
    signal: AbortSignal.timeout(TIMEOUT_MS) });
  if (request !== curveRequests) return; // a click (or the next poll) asked for another curve meanwhile
  if (response.status === 404 && selectedPod) { // the selected pod is unknown (another tournament?)
    selectedPod = null;
    return;
  }
  if (!response.ok) throw new Error(`curve of ${pod}: HTTP ${response.status}`);
  const curve = await response.json();
  if (request !== curveRequests) return;
  const role = pod === state.champion ? "the champion" : curve.status;
  const ancestors = curve.ancestors || [];
  byId("curve-title").textContent = `Learning curve of ${curve.pod_id} (${curve.algo}, ${role})`
    + (ancestors.length ? ` after ${ancestors.length} ancestor${ancestors.length > 1 ? "s" : ""}` : "");
  const offset = curve.offset || 0;
  const rows = curve.rows.filter((r) => r.step !== null && r.eval_mean !== null);
  const colour = colourOf(curve.algo);
  const series = ancestors.map((a, i) => ({
    kind: "line", colour: "#9aa1ae", width: 1.5, label: i === 0 ? "ancestors" : undefined,
    points: a.points.filter((p) => p[1] !== null),
  }));
  series.push(
    { kind: "band", colour, points: rows.map((r) => [offset + r.step, r.eval_mean - (r.eval_std || 0),
      r.eval_mean + (r.eval_std || 0)]) },
    { kind: "line", colour, label: `${curve.pod_id}: evaluation mean ± std`, markers: rows.length < 60,
      points: rows.map((r) => [offset + r.step, r.eval_mean]) },
  );
  drawChart(byId("curve-chart"), {
    series,
    xLabel: ancestors.length ? "env steps along the lineage" : "env steps of this pod",
    yLabel: "evaluation return",
    target: state.tournament ? state.tournament.target : null,
    emptyText: `${curve.pod_id} has no evaluation yet`,
  });
}

// ----------------------------------------------------------------- the page
function card(label, value, sub, cls) {
  return el("div", { class: "card" }, el("div", { class: "label" }, label),
    el("div", { class: `value ${cls || ""}` }, value), el("div", { class: "sub" }, sub || ""));
}

function renderHeader(t) {
  const badge = byId("status");
  let text = t.status, cls = t.status;
  if (t.status === "running" && t.stale) {
    cls = "stale";
    text = t.heartbeat_age === null ? "running? no heartbeat" : `running? no heartbeat for ${fmtDuration(t.heartbeat_age)}`;
  } else if (t.status !== "running" && t.stop_reason && t.stop_reason !== t.status) {
    text = `${t.status}: ${t.stop_reason}`;
  }
  badge.textContent = text;
  badge.className = `badge ${cls}`;
  byId("name").textContent = t.name;
  const algos = Object.entries(t.algos).map(([a, w]) => `${a} ${w}`).join(", ");
  const budget = [];
  if (t.target !== null) budget.push(`target ${t.target}`);
  if (t.budget.seconds !== null) budget.push(`${fmtDuration(t.budget.seconds)}`);
  if (t.budget.steps !== null) budget.push(`${fmtInt(t.budget.steps)} steps`);
  const owner = t.owner ? `; run by ${t.owner}` + (t.heartbeat_age !== null ? `, heartbeat ${fmtDuration(t.heartbeat_age)} ago` : "") : "";
  byId("summary").textContent = `${t.env} · ${algos} · ${t.backend || "?"} backend · stops at ${budget.join(" or ") || "?"}${owner}`;
}

function renderCards(state) {
  const t = state.tournament, best = state.leaderboard[0];
  const counts = t.pods;
  const reached = t.target === null ? ["none", "stops on its budget", ""]
    : t.reached ? [`${t.target} ✓`, `reached ${fmtDuration(t.time_to_target)} into the run`, "good"]
    : [String(t.target), !best ? "not reached yet"
        : best.score_mean < t.target ? `best is ${fmtNumber(t.target - best.score_mean)} below`
        : "the best mean is above it, not yet confirmed (mean − margin × its standard error)", ""];
  byId("cards").replaceChildren(
    card("best score", best ? fmtScore(best.score_mean, best.score_std) : "–",
      best ? `${best.pod_id} (${best.algo})` + (best.score_episodes ? `, ${best.score_episodes} episodes` : "") : "no entry yet"),
    card("target", reached[0], reached[1], reached[2]),
    card("elapsed", fmtDuration(t.elapsed), t.budget.seconds !== null ? `of ${fmtDuration(t.budget.seconds)}` : ""),
    card("env steps", fmtInt(t.steps), t.budget.steps !== null ? `of ${fmtInt(t.budget.steps)}` : "all pods together"),
    card("pods", `${counts.running || 0} running`,
      `${counts.queued || 0} queued · ${counts.preempted || 0} preempted · ${counts.finished || 0} finished · ${counts.failed || 0} failed`),
  );
}

function renderTables(state) {
  fillTable("leaderboard", state.leaderboard, (e) => [
    [e.rank, "num"], [e.pod_id], [el("span", {}, el("span", { class: "dot", style: `background:${colourOf(e.algo)}` }), e.algo)],
    [fmtScore(e.score_mean, e.score_std), "num"], [e.score_episodes ?? "–", "num"], [fmtInt(e.steps), "num"],
    [fmtInt(e.total_steps), "num"], [fmtNumber(e.wall_time, 0), "num"], [e.parent_id || "–"],
  ], "no entry yet: pods enter when they report", (e) => `${e.pod_id} hyperparameters:\n${fmtHparams(e.hparams)}`);
  fillTable("pool", state.pool, (p) => [
    [p.pod_id], [p.algo], [p.status + (p.attempts > 1 ? ` (attempt ${p.attempts})` : "")], [p.parent_id || "–"],
    [fmtNumber(p.running_s, 0), "num"], [fmtInt(p.steps), "num"],
    [p.latest_eval ? `${fmtScore(p.latest_eval.mean, p.latest_eval.std)} @ ${fmtInt(p.latest_eval.step)}` : "–", "num"],
  ], state.tournament.status === "running" ? "the pool is empty" : "the pool is empty: the tournament is not running");
  const seen = new Set();
  fillTable("history", state.history, (h) => {
    seen.add(`${h.pod_id}@${h.elapsed}`);
    return [
      [fmtNumber(h.elapsed, 0), "num"], [h.pod_id], [h.algo], [h.parent_id || "–"], [h.outcome, `outcome-${h.outcome}`],
      [h.rank ?? "–", "num"], [fmtScore(h.score_mean, h.score_std), "num"], [fmtInt(h.steps), "num"], [h.error || "", "error"],
    ];
  }, "no result yet");
  if (knownHistory) {
    for (const tr of byId("history").tBodies[0].rows) {
      const h = state.history[tr.sectionRowIndex];
      if (h && !knownHistory.has(`${h.pod_id}@${h.elapsed}`)) tr.classList.add("fresh");
    }
  }
  knownHistory = seen;
}

function render(state) {
  const t = state.tournament;
  byId("footer").textContent = `run directory ${state.tournament_dir}` + (t ? ` · database ${t.database}` : "");
  if (!t) {
    byId("main").hidden = true;
    byId("empty").hidden = false;
    byId("empty-message").textContent = state.message;
    byId("status").textContent = "waiting for a tournament";
    byId("status").className = "badge waiting";
    return;
  }
  byId("empty").hidden = true;
  byId("main").hidden = false;
  renderHeader(t);
  renderCards(state);
  renderTables(state);
  drawProgress(state);
  const best = state.leaderboard[0];
  document.title = `podium · ${t.status} · best ${best ? fmtNumber(best.score_mean) : "–"}`;
  const banner = byId("banner");
  if (t.status === "running" && t.stale) {
    banner.hidden = false;
    banner.className = "banner warn";
    banner.textContent = `The orchestrator (${t.owner || "no owner"}) has not reported for more than ${fmtDuration(t.stale_after)}: `
      + `it may have stopped. If so, continue the tournament with: podium tournament resume ${state.tournament_dir}`;
  } else if (!banner.classList.contains("failed")) {
    banner.hidden = true;
  }
}

function showFailure(error) {
  const banner = byId("banner");
  const since = lastGood ? `showing the state from ${fmtTime(lastGood)}` : "nothing to show yet";
  banner.hidden = false;
  banner.className = "banner failed";
  banner.textContent = `The last update failed (${error.message || error}); ${since}. Retrying every ${POLL_MS / 1000} s.`;
  byId("live").textContent = `update failed at ${fmtTime(new Date())}`;
  byId("live").classList.add("failed");
}

async function poll() {
  try {
    const response = await fetch("api/state", { cache: "no-store", signal: AbortSignal.timeout(TIMEOUT_MS) });
    if (!response.ok) {
      let detail = `HTTP ${response.status}`;
      try {
        detail = (await response.json()).detail || detail;
      } catch (_) { /* not JSON: keep the status */ }
      throw new Error(detail);
    }
    const state = await response.json();
    const banner = byId("banner");
    if (banner.classList.contains("failed")) {
      banner.classList.remove("failed");
      banner.hidden = true;
    }
    render(state);
    lastState = state;
    if (state.tournament) await drawCurve(state);
    lastGood = new Date();
    byId("live").textContent = `live · updated ${fmtTime(lastGood)} · every ${POLL_MS / 1000} s`;
    byId("live").classList.remove("failed");
  } catch (error) {
    showFailure(error);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const id of ["leaderboard", "pool", "history"]) {
    byId(id).addEventListener("click", (event) => {
      const row = event.target.closest("tr[data-pod]");
      if (!row) return;
      selectedPod = row.dataset.pod;
      for (const tr of document.querySelectorAll("tr.selected")) tr.classList.remove("selected");
      for (const tr of document.querySelectorAll(`tr[data-pod="${CSS.escape(selectedPod)}"]`)) tr.classList.add("selected");
      if (lastState) drawCurve(lastState).catch(showFailure);
    });
  }
  byId("curve-reset").addEventListener("click", () => {
    selectedPod = null;
    for (const tr of document.querySelectorAll("tr.selected")) tr.classList.remove("selected");
    if (lastState) drawCurve(lastState).catch(showFailure);
  });
  poll();
});
