// Kale dashboard: polls the read-only JSON API and draws with the locally served plotly.js.
"use strict";

const state = { tab: "cluster", job: null, sim: null, refreshS: 5, timer: null, meta: null };
const PLOT_CONFIG = { displaylogo: false, responsive: true };
const COLORS = { arrival: "#1d2733", forecast: "#2f6fb3", band: "rgba(47,111,179,0.18)",
                 capacity: "#e07b00", consumption: "#8a9aa9", workers: "#2f6fb3",
                 ps: "#7c4dbb", planned: "#8a9aa9", up: "#1b7f3b", down: "#c0392b",
                 slo: "#c0392b", age: "#1d2733", backlog: "#8a9aa9", quota: "#c0392b" };

// -- helpers ---------------------------------------------------------------------------------
async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.json();
}
const ms = (t) => (t === null || t === undefined ? null : t * 1000);
const msAll = (ts) => ts.map(ms);
// The one number formatter (common/numbers.py, line for line), so a number reads the same in
// the terminal, the simulator's report and here: 3 significant digits, k/M/G/T/P from 1000 up
// (8.03k, 14.9k), whole numbers below 1000 exact, never an exponent, ties away from zero on
// the exact value (toPrecision), below 1e-12 zero.
const SUFFIXES = ["", "k", "M", "G", "T", "P"];
const TINY = 1e-12;
function fmt(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return String(v);
  if (!Number.isFinite(v)) return v > 0 ? "∞" : "-∞";
  if (Math.abs(v) < 1000 && Number.isInteger(v)) return String(v);
  let m = Math.abs(v), tier = 0;
  if (m < TINY) return "0";
  while (m >= 1000 && tier < SUFFIXES.length - 1) { m /= 1000; tier += 1; }
  for (;;) {
    const r = Number(m.toPrecision(digits));  // 9.996 → 10.0, 999.7 → 1.00e+3
    const d = Math.max(0, digits - 1 - Number(r.toExponential().split("e")[1]));
    if (r < 1000 || tier === SUFFIXES.length - 1) {
      return (v < 0 ? "-" : "") + r.toFixed(d) + SUFFIXES[tier];
    }
    m = r / 1000; tier += 1;
  }
}
function fmtPct(fraction) {
  if (fraction === null || fraction === undefined) return "–";
  if (typeof fraction !== "number") return String(fraction);
  const text = fmt(100 * fraction);
  return text === "–" ? text : text + "%";
}
// A run "keeps the SLO" when at most this share of its steps were late (docs/design.md: ≤ 1 %).
const SLO_BUDGET = 0.01;
// Per metric, the runs to highlight: the lowest value among the runs that kept the SLO. The
// cheapest run is no win if it broke the SLO, so a run over budget is never highlighted.
function simBest(policies, names, keys) {
  const kept = names.filter((n) => (policies[n].slo_violation_rate ?? Infinity) <= SLO_BUDGET);
  const best = {};
  for (const key of keys) {
    const low = Math.min(...kept.map((n) => policies[n][key] ?? Infinity));
    best[key] = kept.filter((n) => Number.isFinite(low) && policies[n][key] === low);
  }
  return best;
}
function fmtDur(s) {
  if (s === null || s === undefined) return "–";
  if (s < 90) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 5400) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
function fmtTime(t) {
  if (t === null || t === undefined) return "–";
  return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 16) + "Z";
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function baseLayout(title, extra = {}) {
  return Object.assign({
    title: { text: title, font: { size: 14 }, x: 0.02 },
    margin: { l: 60, r: 60, t: 40, b: 70 },
    legend: { orientation: "h", y: -0.28 },
    hovermode: "x unified",
    xaxis: { type: "date" },
    paper_bgcolor: "#fff", plot_bgcolor: "#fff",
  }, extra);
}
// Every hovered value goes through fmt as well, so the plots read like the tables (plotly's
// own number format would write 14.9205k).
function withHoverText(trace) {
  if (trace.hovertemplate || trace.hoverinfo || !Array.isArray(trace.y)) return trace;
  return Object.assign({ text: trace.y.map((v) => fmt(v)), hovertemplate: "%{text}" }, trace);
}
function draw(id, traces, layout) {
  return Plotly.react(id, traces.map(withHoverText), layout, PLOT_CONFIG);
}

// -- cluster ---------------------------------------------------------------------------------
async function refreshCluster() {
  const [jobs, cluster, decisions] = await Promise.all([
    getJSON("/api/jobs"), getJSON("/api/cluster"), getJSON("/api/decisions?limit=40")]);
  renderJobsTable(jobs.jobs);
  updateJobSelect(jobs.jobs);
  const traces = [{
    x: msAll(cluster.time), y: cluster.gpus, name: "GPUs held", type: "scatter",
    mode: "lines", line: { shape: "hv", color: COLORS.workers }, fill: "tozeroy",
  }];
  if (cluster.quota_gpus !== null && cluster.quota_gpus !== undefined && cluster.time.length) {
    traces.push({ x: [ms(cluster.time[0]), ms(cluster.time[cluster.time.length - 1])],
                  y: [cluster.quota_gpus, cluster.quota_gpus], name: "GPU quota",
                  type: "scatter", mode: "lines", line: { dash: "dash", color: COLORS.quota } });
  }
  const used = `${cluster.gpus_now ?? 0} GPUs now` +
    (cluster.quota_gpus != null ? ` of ${cluster.quota_gpus}` : " (no quota)") +
    `; ${fmt(cluster.gpu_hours)} GPU-hours shown`;
  await draw("plot-quota", traces, baseLayout(`GPU quota used vs available — ${used}`,
    { yaxis: { title: { text: "GPUs" }, rangemode: "tozero" } }));
  renderDecisions(decisions.decisions);
}

function renderJobsTable(jobs) {
  const body = document.querySelector("#jobs-table tbody");
  body.replaceChildren();
  document.getElementById("jobs-empty").hidden = jobs.length > 0;
  for (const j of jobs) {
    const tr = document.createElement("tr");
    tr.className = "clickable" + (j.oldest_age_s > j.slo_s ? " bad" : "");
    tr.onclick = () => { state.job = j.key; location.hash = "job"; };
    cell(tr, j.key);
    cell(tr, j.resizing ? `${fmt(j.workers)} (resizing)` : fmt(j.workers), "num");
    cell(tr, fmt(j.ps), "num");
    cell(tr, fmt(j.planned_workers), "num");
    cell(tr, j.action || "–");
    cell(tr, fmt(j.arrival_rate), "num");
    cell(tr, fmt(j.capacity), "num");
    cell(tr, fmt(j.backlog), "num");
    cell(tr, fmtDur(j.oldest_age_s), "num");
    cell(tr, fmtDur(j.slo_s), "num");
    cell(tr, j.ready ? `${j.ready.status}${j.ready.reason ? " (" + j.ready.reason + ")" : ""}`
                     : "–");
    body.appendChild(tr);
  }
}

function renderDecisions(rows) {
  const body = document.querySelector("#decisions-table tbody");
  body.replaceChildren();
  for (const d of rows) {
    const tr = document.createElement("tr");
    tr.className = d.error ? "bad" : d.resized ? "resize" : "";
    cell(tr, fmtTime(d.time));
    cell(tr, d.job);
    cell(tr, d.action || "–");
    const sizes = d.resized ? `${fmt(d.from_workers)} → ${fmt(d.to_workers)}`
                            : fmt(d.to_workers ?? d.from_workers);
    cell(tr, sizes, "num");
    cell(tr, d.error ? `${d.why || ""} (${d.error})` : d.why || "–");
    cell(tr, fmt(d.arrival_rate), "num");
    cell(tr, fmt(d.forecast_peak), "num");
    cell(tr, fmtDur(d.oldest_age_s), "num");
    body.appendChild(tr);
  }
}

function updateJobSelect(jobs) {
  const sel = document.getElementById("job-select");
  const keys = jobs.map((j) => j.key);
  if (!state.job || !keys.includes(state.job)) state.job = keys[0] || null;
  const have = Array.from(sel.options).map((o) => o.value);
  if (have.join("|") !== keys.join("|")) {
    sel.replaceChildren(...keys.map((k) => new Option(k, k)));
  }
  if (state.job) sel.value = state.job;
}

// -- one job ---------------------------------------------------------------------------------
async function refreshJob() {
  if (!state.job) {
    updateJobSelect((await getJSON("/api/jobs")).jobs);
    if (!state.job) return;
  }
  const s = await getJSON(`/api/jobs/${state.job}/series`);
  const t = msAll(s.time);
  const fc = s.forecast;
  const ft = msAll(fc.time);
  const info = s.info;
  document.getElementById("job-summary").textContent =
    `${info.mode} · workers ${info.min_workers}–${info.max_workers} · ${info.ratio} workers/PS` +
    ` · rescale ${fmtDur(info.rescale_s)} · SLO ${fmtDur(info.slo_s)} · forecast ` +
    `${fc.model || "–"} · peak ${fmt(info.peak_throughput)}/s at ${info.peak_workers} workers`;

  await draw("plot-rate", [
    { x: ft, y: fc.p10, type: "scatter", mode: "lines", line: { width: 0 },
      showlegend: false, hoverinfo: "skip", name: "p10" },
    { x: ft, y: fc.p90, type: "scatter", mode: "lines", line: { width: 0 }, fill: "tonexty",
      fillcolor: COLORS.band, name: "forecast p10–p90" },
    { x: ft, y: fc.mean, type: "scatter", mode: "lines", name:
      `forecast (made ${fmtDur(fc.lead_s)} earlier)`,
      line: { dash: "dash", color: COLORS.forecast } },
    { x: t, y: s.arrival_rate, type: "scatter", mode: "lines", name: "arrival rate",
      line: { color: COLORS.arrival } },
    { x: t, y: s.capacity, type: "scatter", mode: "lines", name: "capacity f(w)",
      line: { shape: "hv", color: COLORS.capacity } },
    { x: t, y: s.consumption_rate, type: "scatter", mode: "lines", name: "consumption",
      line: { width: 1, color: COLORS.consumption }, visible: "legendonly" },
  ], baseLayout("Arrival rate vs forecast and capacity",
    { yaxis: { title: { text: "samples/s" }, rangemode: "tozero" } }));

  const ups = s.resizes.filter((r) => r.to_workers >= r.from_workers);
  const downs = s.resizes.filter((r) => r.to_workers < r.from_workers);
  const marks = (rs, name, symbol, color) => ({
    x: rs.map((r) => ms(r.time)), y: rs.map((r) => r.to_workers), type: "scatter",
    mode: "markers", name, marker: { symbol, size: 11, color },
    hovertext: rs.map((r) => `${r.from_workers} → ${r.to_workers} workers ` +
                             `(${r.from_ps} → ${r.to_ps} PS): ${r.why || r.action}`),
    hoverinfo: "text",
  });
  await draw("plot-size", [
    { x: t, y: s.workers, type: "scatter", mode: "lines", name: "workers",
      line: { shape: "hv", color: COLORS.workers } },
    { x: t, y: s.ps, type: "scatter", mode: "lines", name: "PS",
      line: { shape: "hv", color: COLORS.ps } },
    { x: t, y: s.planned_workers, type: "scatter", mode: "lines", name: "planned",
      line: { shape: "hv", dash: "dot", color: COLORS.planned } },
    marks(ups, "scale up", "triangle-up", COLORS.up),
    marks(downs, "scale down", "triangle-down", COLORS.down),
  ], baseLayout("Workers and PS (resizes marked; hover for the reason)",
    { yaxis: { title: { text: "pods" }, rangemode: "tozero" } }));

  const ageMin = s.oldest_age_s.map((a) => (a === null ? null : a / 60));
  const delayTraces = [
    { x: t, y: ageMin, type: "scatter", mode: "lines", name: "oldest unconsumed age",
      line: { color: COLORS.age } },
    { x: t, y: s.backlog, type: "scatter", mode: "lines", name: "backlog (samples)",
      yaxis: "y2", line: { width: 1, color: COLORS.backlog } },
  ];
  if (s.slo_s !== null && t.length) {
    delayTraces.push({ x: [t[0], t[t.length - 1]], y: [s.slo_s / 60, s.slo_s / 60],
                       type: "scatter", mode: "lines", name: `SLO ${fmtDur(s.slo_s)}`,
                       line: { dash: "dash", color: COLORS.slo } });
  }
  await draw("plot-delay", delayTraces, baseLayout("Backlog and oldest unconsumed age vs SLO", {
    yaxis: { title: { text: "minutes" }, rangemode: "tozero" },
    yaxis2: { title: { text: "samples" }, overlaying: "y", side: "right",
              rangemode: "tozero", showgrid: false },
  }));

  const tp = s.throughput;
  const tpTraces = [
    { x: tp.workers, y: tp.capacity, type: "scatter", mode: "lines", name: "f(w)",
      line: { color: COLORS.capacity } },
    { x: [tp.peak_workers], y: [tp.peak_throughput], type: "scatter", mode: "markers",
      name: `peak: ${tp.peak_workers} workers`, marker: { symbol: "star", size: 14,
                                                        color: COLORS.down } },
  ];
  if (tp.current_workers !== null) {
    tpTraces.push({ x: [tp.current_workers], y: [tp.current_throughput], type: "scatter",
                    mode: "markers", name: `now: ${tp.current_workers} workers`,
                    marker: { size: 12, color: COLORS.workers } });
  }
  if (tp.arrival_rate !== null && tp.workers.length) {
    tpTraces.push({ x: [tp.workers[0], tp.workers[tp.workers.length - 1]],
                    y: [tp.arrival_rate, tp.arrival_rate], type: "scatter", mode: "lines",
                    name: "arrival rate now", line: { dash: "dot", color: COLORS.arrival } });
  }
  await draw("plot-throughput", tpTraces, baseLayout("Throughput curve f(w), p = ⌈w/ratio⌉", {
    hovermode: "closest", xaxis: { title: { text: "workers", standoff: 4 } },
    yaxis: { title: { text: "samples/s" }, rangemode: "tozero" },
  }));
}

// -- simulations -----------------------------------------------------------------------------
const SIM_METRICS = [
  ["slo_violation_rate", "SLO violations (%)", 100],
  ["cumulative_delay_min", "cumulative delay (min)", 1],
  ["downtime_min", "downtime (min)", 1],
  ["rescale_count", "rescales", 1],
  ["gpu_hours", "GPU-hours", 1],
];

async function refreshSims() {
  const index = (await getJSON("/api/simulations")).simulations;
  document.getElementById("sims-empty").hidden = index.length > 0;
  const sel = document.getElementById("sim-select");
  const ids = index.map((s) => String(s.id));
  if (Array.from(sel.options).map((o) => o.value).join("|") !== ids.join("|")) {
    sel.replaceChildren(...index.map((s) => new Option(s.title || s.name, String(s.id))));
  }
  if (!index.length) return;
  if (state.sim === null || !ids.includes(String(state.sim))) state.sim = index[0].id;
  sel.value = String(state.sim);
  const sim = await getJSON(`/api/simulations/${state.sim}`);
  const summary = document.getElementById("sim-summary");
  if (sim.error) { summary.textContent = sim.error; return; }
  const names = Object.keys(sim.policies);
  summary.textContent = [sim.job && `job ${sim.job}`, sim.steps && `${sim.steps} steps`,
    sim.interval_s && `of ${fmtDur(sim.interval_s)}`,
    sim.lower_bound_gpu_hours != null && `lower bound ${fmt(sim.lower_bound_gpu_hours)} GPU-h`,
    sim.note].filter(Boolean).join(" · ");
  renderSimTable(sim, names);
  const traces = SIM_METRICS.map(([key, label, k], i) => ({
    type: "bar", name: label, x: names, y: names.map((n) => (sim.policies[n][key] ?? 0) * k),
    xaxis: i ? `x${i + 1}` : "x", yaxis: i ? `y${i + 1}` : "y", showlegend: false,
    marker: { color: names.map((n) => (n.startsWith("kale") ? COLORS.forecast : "#9aa7b4")) },
    // The hover reads like the table: the one formatter, not plotly's own number format.
    text: names.map((n) => fmt(sim.policies[n][key] == null ? null : sim.policies[n][key] * k)),
    textposition: "none",
    hovertemplate: `%{x}: %{text} ${label}<extra></extra>`,
  }));
  const layout = baseLayout("Policies side by side", { grid: { rows: 1, columns: SIM_METRICS.length,
    pattern: "independent" }, hovermode: "closest", margin: { l: 40, r: 20, t: 70, b: 80 } });
  delete layout.xaxis;
  layout.annotations = SIM_METRICS.map(([, label], i) => ({
    text: label, showarrow: false, xref: `x${i ? i + 1 : ""} domain`, yref: "paper",
    x: 0.5, y: 1.08, font: { size: 12 } }));
  await draw("plot-sim-bars", traces, layout);
  const box = document.getElementById("plot-sim-series").parentElement;
  box.hidden = !sim.series;
  if (sim.series) await drawSimSeries(sim);
}

function renderSimTable(sim, names) {
  const table = document.getElementById("sim-table");
  const head = document.createElement("tr");
  ["policy", ...SIM_METRICS.map((m) => m[1]), "× lower bound", "mean workers",
   "max delay (min)"].forEach((h) => { const th = document.createElement("th");
                                       th.textContent = h; head.appendChild(th); });
  table.tHead.replaceChildren(head);
  const body = table.tBodies[0];
  body.replaceChildren();
  const best = simBest(sim.policies, names, SIM_METRICS.map((m) => m[0]));
  for (const n of names) {
    const p = sim.policies[n];
    const tr = document.createElement("tr");
    cell(tr, n);
    for (const [key, , k] of SIM_METRICS) {
      const value = p[key] ?? null;
      const text = value === null ? "–" : k === 100 ? fmtPct(value) : fmt(value * k);
      cell(tr, text, "num" + (best[key].includes(n) ? " best" : ""));
    }
    cell(tr, fmt(p.lower_bound_ratio), "num");
    cell(tr, fmt(p.mean_workers), "num");
    cell(tr, fmt(p.max_delay_min), "num");
    body.appendChild(tr);
  }
}

async function drawSimSeries(sim) {
  const s = sim.series;
  const t = msAll(s.time);
  const traces = [];
  const palette = ["#2f6fb3", "#1b7f3b", "#c0392b", "#e07b00", "#7c4dbb", "#8a6d3b", "#555"];
  Object.entries(s.policies).forEach(([name, p], i) => {
    const tt = p.time ? msAll(p.time) : t;  // a live run has its own ticks
    const color = palette[i % palette.length];
    traces.push({ x: tt, y: p.workers, name, type: "scatter", mode: "lines",
                  line: { shape: "hv", color }, legendgroup: name });
    traces.push({ x: tt, y: p.delay_min, name: `${name} delay`, type: "scatter",
                  mode: "lines", line: { color, width: 1 }, xaxis: "x2", yaxis: "y2",
                  legendgroup: name, showlegend: false });
  });
  if (s.arrivals) {
    traces.push({ x: t, y: s.arrivals, name: "arrival rate", type: "scatter", mode: "lines",
                  yaxis: "y3", line: { color: "#bbb", width: 1 } });
  }
  const layout = baseLayout("Workers and delay per policy", {
    grid: { rows: 2, columns: 1, pattern: "independent", roworder: "top to bottom" },
    yaxis: { title: { text: "workers" }, rangemode: "tozero" },
    yaxis2: { title: { text: "delay (min)" }, rangemode: "tozero" },
    yaxis3: { overlaying: "y", side: "right", title: { text: "samples/s" }, showgrid: false,
              rangemode: "tozero" },
    xaxis2: { type: "date", matches: "x" },
  });
  if (sim.slo_s) {
    layout.shapes = [{ type: "line", xref: "x2 domain", yref: "y2", x0: 0, x1: 1,
                       y0: sim.slo_s / 60, y1: sim.slo_s / 60,
                       line: { dash: "dash", color: COLORS.slo } }];
  }
  await draw("plot-sim-series", traces, layout);
}

// -- tabs and refresh ------------------------------------------------------------------------
function showTab(tab) {
  state.tab = ["cluster", "job", "simulations"].includes(tab) ? tab : "cluster";
  for (const el of document.querySelectorAll(".panel")) {
    el.hidden = el.id !== `tab-${state.tab}`;
  }
  for (const a of document.querySelectorAll(".tab[data-tab]")) {
    a.classList.toggle("active", a.dataset.tab === state.tab);
  }
  refresh();
}

async function refresh() {
  const status = document.getElementById("updated");
  try {
    if (state.tab === "cluster") await refreshCluster();
    else if (state.tab === "job") await refreshJob();
    else await refreshSims();
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "true";
  } catch (err) {
    status.textContent = `update failed: ${err.message}`;
  }
}

function schedule() {
  clearInterval(state.timer);
  if (document.getElementById("auto-refresh").checked) {
    state.timer = setInterval(refresh, state.refreshS * 1000);
  }
}

async function start() {
  try {
    state.meta = await getJSON("/api/meta");
    state.refreshS = state.meta.refresh_s || 5;
    const d = state.meta.display;
    if (d && d.note) document.getElementById("display-note").textContent = d.note;
    document.title = state.meta.title || document.title;
  } catch (err) { /* the first refresh reports it */ }
  document.getElementById("job-select").onchange = (e) => { state.job = e.target.value;
                                                            refresh(); };
  document.getElementById("sim-select").onchange = (e) => { state.sim = e.target.value;
                                                            refresh(); };
  document.getElementById("auto-refresh").onchange = schedule;
  window.addEventListener("hashchange", () => showTab(location.hash.slice(1)));
  showTab(location.hash.slice(1) || "cluster");
  schedule();
}

start();
