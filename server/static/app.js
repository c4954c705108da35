// grpo dashboard: runs list, per-run reward curves, deadlock rate and
// meals, trainer jobs and steps; live over the /ws event stream. Plain
// JavaScript and SVG, no external assets.
"use strict";

const $ = (sel) => document.querySelector(sel);
const SVGNS = "http://www.w3.org/2000/svg";
const state = { selected: null, run: null, jobs: {}, live: new Map(), committed: -1, endpoints: new Map(), warnings: new Map(), reads: new Set(), refresh: null, compare: new Set(), others: {}, ws: null, resize: null };

// The compared runs come from the address (?run=A&compare=B,C), so that a
// reload or a shared link shows the same comparison.
for (const name of (new URLSearchParams(location.search).get("compare") || "").split(",")) if (name) state.compare.add(name);

// COMPARE_COLORS tell compared runs apart: the i-th in the list of runs
// ticked (in the order of the address) takes the i-th, round the list.
// None is the orange, blue, red or green of the selected run's curves.
const COMPARE_COLORS = ["#9b59b6", "#00838f", "#c2185b", "#7f8c2d", "#5d4037", "#1f3a93", "#b7950b", "#5d6d7e"];

// showAddress puts the selected run and the compared runs in the address.
function showAddress() {
  let q = "?run=" + encodeURIComponent(state.selected);
  const others = [...state.compare].filter((n) => n !== state.selected);
  if (others.length > 0) q += "&compare=" + others.map(encodeURIComponent).join(",");
  history.replaceState(null, "", q);
}

// view returns the chart controls: EMA smoothing weight and step range.
function view() {
  const num = (id) => { const v = $(id).value.trim(); return v === "" ? null : Number(v); };
  return { smooth: Number($("#smooth").value) || 0, from: num("#xfrom"), to: num("#xto") };
}

// ema smooths [step, value] points: s_i = a*s_{i-1} + (1-a)*v_i.
function ema(pts, a) {
  if (!a) return pts;
  let prev = null;
  return pts.map(([x, v]) => { prev = prev === null ? v : a * prev + (1 - a) * v; return [x, prev]; });
}

// validation returns a run view's validation curve.
function validation(r) { return r.steps.filter((s) => s.validation).map((s) => [s.step, s.validation.reward_mean]); }

// count says n things: "1 replay", "2 replays".
function count(n, thing) { return n + " " + thing + (n === 1 ? "" : "s"); }

function fmt(x, d = 3) { return x === null || x === undefined ? "-" : Number(x).toFixed(d); }

function el(tag, attrs = {}, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

async function api(path, opts = {}) {
  const resp = await fetch(path, opts);
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body.error || resp.status + " " + resp.statusText);
  return body;
}

// loadRuns reads the first page of the runs list (name order; the
// daemon's page size). It is read again when a run starts or finishes, not
// at every step: updateRow moves a row from its run's events.
async function loadRuns() {
  const runs = await api("/api/v1/runs");
  const tbody = $("#runs tbody");
  tbody.replaceChildren();
  for (const r of runs) {
    const tr = el("tr", { "data-run": r.name });
    if (r.name === state.selected) tr.classList.add("selected");
    const link = el("a", { href: "?run=" + encodeURIComponent(r.name) }, r.name);
    link.addEventListener("click", (e) => { e.preventDefault(); select(r.name); });
    tr.append(el("td", {}, ""), el("td", {}, r.state + (r.hosted ? "" : "")), el("td", {}, r.steps),
      el("td", {}, r.best_step >= 0 ? r.best_step : "-"));
    tr.firstChild.append(link);
    const cmp = el("input", { type: "checkbox", class: "compare", title: "overlay this run's validation curve" });
    cmp.checked = state.compare.has(r.name);
    cmp.addEventListener("click", (e) => e.stopPropagation());
    cmp.addEventListener("change", () => {
      if (cmp.checked) state.compare.add(r.name); else state.compare.delete(r.name);
      if (state.selected) showAddress();
      loadOthers().then(() => state.run && render(state.run)).catch(console.error);
    });
    tr.append(el("td", {}, ""));
    tr.lastChild.append(cmp);
    tr.addEventListener("click", () => select(r.name));
    tbody.append(tr);
  }
  // /?run=NAME opens that run; else the most recent one.
  const wanted = new URLSearchParams(location.search).get("run");
  if (!state.selected && wanted) select(wanted);
  else if (!state.selected && runs.length > 0) select(runs.reduce((a, b) => (b.created > a.created ? b : a)).name);
}

// updateRow moves one run's row from its step_committed or best_changed
// event; a run not on the page loaded has no row.
function updateRow(ev) {
  const tr = [...document.querySelectorAll("#runs tbody tr")].find((r) => r.dataset.run === ev.run);
  if (!tr) return;
  if (ev.type === "step_committed") tr.children[2].textContent = ev.step;
  if (ev.type === "best_changed") tr.children[3].textContent = ev.data.step;
}

function select(name) {
  state.selected = name;
  state.run = null; // the previous run's, until loadRun reads this one
  showAddress();
  state.jobs = {};
  state.live = new Map();
  state.committed = -1;
  state.tx = null;
  $("#tx-list").replaceChildren();
  $("#tx-replay").hidden = true;
  $("#tx-none").textContent = "No step selected.";
  $("#promote-result").textContent = "";
  $("#progress").textContent = "";
  $("#underway").hidden = true;
  $("#cancel-error").textContent = "";
  state.actionError = null;
  state.endpoints = new Map();
  showEndpoints();
  state.warnings = new Map();
  showWarnings();
  for (const tr of document.querySelectorAll("#runs tbody tr")) tr.classList.toggle("selected", tr.dataset.run === name);
  loadRun();
}

// loadRun reads the selected run, and from the same answer its inference
// endpoints down now (endpoints_down, as their endpoint_state events): the
// list is right again after the websocket reconnected, whatever events it
// missed meanwhile. The events that come while the answer is on its way
// are applied again on top of it, in order: they may be newer than it.
// The run's warnings (warnings, while it plays in the daemon) join those
// its warning events brought since it was selected.
async function loadRun() {
  if (!state.selected) return;
  const name = state.selected;
  const meanwhile = [];
  state.reads.add(meanwhile);
  let r;
  try {
    r = await api("/api/v1/runs/" + encodeURIComponent(name));
  } finally {
    state.reads.delete(meanwhile);
  }
  if (name !== state.selected) return;
  state.endpoints = new Map();
  for (const ev of [...(r.endpoints_down || []), ...meanwhile]) endpointEvent(ev);
  showEndpoints();
  for (const ev of r.warnings || []) warningEvent(ev);
  showWarnings();
  state.run = r;
  await loadOthers();
  render(r);
}

// loadOthers fetches the runs ticked for comparison.
async function loadOthers() {
  const others = {};
  for (const name of state.compare) {
    if (name === state.selected) continue;
    others[name] = await api("/api/v1/runs/" + encodeURIComponent(name));
  }
  state.others = others;
}

// scheduleRefresh coalesces bursts of events into one reload.
function scheduleRefresh() {
  if (state.refresh) return;
  state.refresh = setTimeout(() => { state.refresh = null; loadRun().catch(console.error); }, 150);
}

function render(r) {
  $("#empty").hidden = true;
  $("#detail").hidden = false;
  $("#run-name").textContent = r.run;
  const st = $("#run-state");
  st.textContent = r.state;
  st.className = "state " + r.state;
  // A failure's error is an error; a cancelled run's (what stopped it)
  // is said plainly.
  $("#run-error").textContent = r.error || "";
  $("#run-error").className = r.state === "failed" ? "error" : "note";
  $("#cancel").hidden = !r.hosted;
  // A refused action's error stays until the run's state makes it moot:
  // a cancel's once the run no longer plays here, a resume's once it does.
  if (state.actionError === "cancel" && !r.hosted || state.actionError === "resume" && r.hosted) {
    $("#cancel-error").textContent = "";
    state.actionError = null;
  }
  // A run no process plays and that did not succeed can be resumed here;
  // a failed one's ended trainer job can be retried.
  const resumable = !r.hosted && r.state !== "succeeded" && !(r.lease && r.lease.live);
  $("#resume").hidden = !resumable;
  $("#retry-job-label").hidden = !resumable || r.state !== "failed";
  showUnderway(r);
  const best = r.best ? r.best.step : null;
  promotable(r);

  const train = [], val = [], band = [], dl = [], meals = [], perN = {}, loss = [], kl = [], gn = [];
  const gap = [], clip = [], ent = [];
  const terms = { rnd: [], rthru: [], rfair: [], ridle: [] };
  for (const s of r.steps) {
    if (s.train) train.push([s.step, s.train.reward_mean]);
    if (s.validation) {
      val.push([s.step, s.validation.reward_mean]);
      band.push([s.step, s.validation.reward_ci95[0], s.validation.reward_ci95[1]]);
      dl.push([s.step, s.validation.deadlock_rate]);
      meals.push([s.step, s.validation.meals_mean]);
      for (const pn of s.validation.per_n || []) (perN[pn.n] = perN[pn.n] || []).push([s.step, pn.reward_mean]);
    }
    // Per-step means of the reward terms over the validation episodes.
    const t = s.validation_terms;
    if (t) {
      terms.rnd.push([s.step, t.r_nd]);
      terms.rthru.push([s.step, t.r_thru]);
      terms.rfair.push([s.step, t.r_fair]);
      terms.ridle.push([s.step, t.r_idle]);
    }
    const m = s.job && s.job.metrics;
    if (m) {
      if (m.loss !== undefined) loss.push([s.step, m.loss]);
      if (m.kl !== undefined) kl.push([s.step, m.kl]);
      if (m.grad_norm !== undefined) gn.push([s.step, m.grad_norm]);
      // Diagnostics only a trainer that reports them has (docs/EVENTS.md).
      if (m.sampler_logprob_gap !== undefined) gap.push([s.step, m.sampler_logprob_gap]);
      if (m.clip_fraction !== undefined) clip.push([s.step, m.clip_fraction]);
      if (m.entropy !== undefined) ent.push([s.step, m.entropy]);
    }
  }
  let steps = r.config && r.config.run ? r.config.run.steps : 1;
  const v = view();
  // Per-n curves only when validation plays several table sizes.
  const ns = Object.keys(perN);
  const nSeries = ns.length > 1 ? ns.map((n) => ({ cls: "pern", pts: ema(perN[n], v.smooth), label: "n=" + n })) : [];
  // Each compared run in its own colour, on the reward chart and (its
  // deadlock rate dashed, its meals dotted) on the deadlock chart.
  const others = [], otherDl = [], otherMeals = [];
  Object.entries(state.others).forEach(([name, o], i) => {
    steps = Math.max(steps, o.config && o.config.run ? o.config.run.steps : 1);
    const color = COMPARE_COLORS[i % COMPARE_COLORS.length];
    const vs = o.steps.filter((s) => s.validation);
    others.push({ cls: "other", color, pts: ema(validation(o), v.smooth), label: name });
    otherDl.push({ cls: "other dl", color, pts: vs.map((s) => [s.step, s.validation.deadlock_rate]), label: name });
    otherMeals.push({ cls: "other meals", color, pts: vs.map((s) => [s.step, s.validation.meals_mean]), name: name + " meals" });
  });
  showCompareLegend(Object.keys(state.others));
  const x = { xmin: v.from ?? 0, xmax: v.to ?? steps };
  chart($("#curve"), [{ cls: "train", pts: ema(train, v.smooth) }, { cls: "val", pts: ema(val, v.smooth) }, ...nSeries, ...others],
    { ...x, best, bestSeries: 1, band });
  chart($("#trainer"), [{ cls: "loss", pts: ema(loss, v.smooth) }, { cls: "kl", pts: ema(kl, v.smooth) }], { ...x, right: { cls: "gradnorm", pts: ema(gn, v.smooth) } });
  chart($("#diagnostics"), [{ cls: "gap", name: "logprob gap", pts: ema(gap, v.smooth) }, { cls: "clip", name: "clip fraction", pts: ema(clip, v.smooth) }],
    { ...x, right: { cls: "entropy", name: "entropy", pts: ema(ent, v.smooth) } });
  const termNames = { rnd: "r_nd", rthru: "r_thru", rfair: "r_fair", ridle: "r_idle" };
  chart($("#terms"), Object.entries(terms).map(([cls, pts]) => ({ cls, name: termNames[cls], pts: ema(pts, v.smooth) })), x);
  chart($("#deadlock"), [{ cls: "dl", pts: dl }, ...otherDl], { ...x, ymin: 0, ymax: 1, right: [{ cls: "meals", pts: meals }, ...otherMeals] });

  const tbody = $("#steps tbody");
  tbody.replaceChildren();
  for (const s of r.steps) {
    const v = s.validation;
    const tr = el("tr", { "data-step": s.step });
    if (s.step === best) tr.classList.add("best");
    tr.append(el("td", {}, s.step + (s.step === best ? " ★" : "")), el("td", {}, s.n),
      el("td", {}, s.train ? fmt(s.train.reward_mean) : "-"), el("td", {}, v ? fmt(v.reward_mean) : "-"),
      el("td", {}, v ? "[" + fmt(v.reward_ci95[0]) + ", " + fmt(v.reward_ci95[1]) + "]" : ""),
      el("td", {}, v ? fmt(v.deadlock_rate, 2) : "-"), el("td", {}, v ? fmt(v.meals_mean, 2) : "-"),
      el("td", {}, s.adapter ? s.adapter.name : "base"),
      el("td", {}, s.job ? s.job.state : (s.step > 0 ? "no signal" : "-")), el("td", {}, ""));
    if (s.transcripts) {
      const b = el("button", { type: "button", class: "tx-open", "data-step": s.step }, count(s.transcripts, "replay"));
      b.addEventListener("click", () => openTranscripts(s.step).catch((err) => { $("#tx-none").textContent = err.message; }));
      tr.lastChild.append(b);
    }
    tbody.append(tr);
  }
  // A stored job is a committed step's: finished. The store keeps no
  // progress figure of it.
  for (const s of r.steps) {
    if (s.job) state.jobs[s.job.id] = { step: s.step, id: s.job.id, state: s.job.state, progress: null,
      ...jobFigures(s.job.metrics), seconds: (new Date(s.job.finished) - new Date(s.job.submitted)) / 1000,
      lagged: !!(s.train && s.train.off_policy_lag > 0) };
  }
  // The job in flight of a run played now is listed before its first
  // job_state event, which a trainer may send only when the job ends.
  const f = r.in_flight;
  if (f && r.lease && r.lease.live && !state.jobs[f.job_id]) {
    state.jobs[f.job_id] = { step: f.step, id: f.job_id, state: "in flight", ...jobFigures(null), seconds: null };
  }
  renderJobs();
}

// showCompareLegend lists the compared runs, each with its colour, in the
// keys of the reward and deadlock charts.
function showCompareLegend(names) {
  const keys = { "#compare-legend": "· compared runs' validation:", "#compare-legend-dl": "· compared runs (deadlock rate dashed, meals dotted):" };
  for (const [id, what] of Object.entries(keys)) {
    const box = $(id);
    box.replaceChildren(what);
    names.forEach((name, i) => {
      const item = el("span", { class: "compared", "data-run": name });
      item.append(el("span", { class: "key", style: "background: " + COMPARE_COLORS[i % COMPARE_COLORS.length] }), name);
      box.append(item);
    });
    box.hidden = names.length === 0;
  }
}

// openTranscripts lists the episode replays step's validation kept.
async function openTranscripts(step) {
  const eps = await api("/api/v1/runs/" + encodeURIComponent(state.selected) + "/steps/" + step + "/transcripts");
  state.tx = { step, eps, ep: null, round: 0 };
  $("#tx-none").textContent = "step " + step + ": " + count(eps.length, "stored episode");
  const ul = $("#tx-list");
  ul.replaceChildren();
  eps.forEach((ep, i) => {
    const li = el("li", { "data-episode": ep.id });
    const b = el("button", { type: "button", class: "tx-episode" }, ep.id);
    b.addEventListener("click", () => { state.tx.ep = i; state.tx.round = 0; renderReplay(); });
    li.append(b, " n=" + ep.n + " table " + ep.seed + ", reward " + fmt(ep.reward) + ", " + count(ep.meals, "meal") +
      (ep.deadlock ? ", deadlocked" : "") + ", " + count(ep.rounds.length, "round"));
    ul.append(li);
  });
  $("#tx-replay").hidden = true;
}

// renderReplay shows one round of the chosen episode: each philosopher's
// tool call, whether it worked, the forks it held after, its raw output.
function renderReplay() {
  const tx = state.tx;
  const ep = tx.eps[tx.ep];
  $("#tx-replay").hidden = false;
  tx.round = Math.max(0, Math.min(tx.round, ep.rounds.length - 1));
  const rd = ep.rounds[tx.round];
  $("#tx-round").textContent = ep.id + ": round " + (rd ? rd.round : "-") + " of " + ep.rounds.length;
  const tbody = $("#tx-moves tbody");
  tbody.replaceChildren();
  if (!rd) return;
  rd.moves.forEach((m, i) => {
    const tr = el("tr", { "data-philosopher": i, class: m.ok ? "ok" : "failed" });
    tr.append(el("td", {}, i), el("td", {}, m.action), el("td", {}, m.ok ? "yes" : "no"),
      el("td", {}, m.forks.length ? m.forks.join(", ") : "none"), el("td", { class: "raw" }, m.output));
    tbody.append(tr);
  });
}

$("#tx-prev").addEventListener("click", () => { if (state.tx) { state.tx.round--; renderReplay(); } });
$("#tx-next").addEventListener("click", () => { if (state.tx) { state.tx.round++; renderReplay(); } });

// GAP_WARNING is orchestrator.LogprobGapWarning: a job's sampler logprob
// gap above it is shown as a warning, as grpo logs one, unless an older
// policy sampled the job's rollouts (the lag is part of the gap).
const GAP_WARNING = 0.05;

// jobFigures are the trainer jobs table's figures of a job's metrics:
// null for a metric not reported (no metrics yet, or a trainer without
// that diagnostic), shown as "-", never as 0.
function jobFigures(m) {
  const get = (k) => m && m[k] !== undefined ? m[k] : null;
  return { loss: get("loss"), optStep: get("optimizer_step"), gap: get("sampler_logprob_gap"), entropy: get("entropy"), updateNorm: get("update_norm") };
}

function renderJobs() {
  const tbody = $("#jobs tbody");
  tbody.replaceChildren();
  const jobs = Object.values(state.jobs).sort((a, b) => a.step - b.step);
  for (const j of jobs) {
    const tr = el("tr", { "data-job": j.id });
    tr.append(el("td", {}, j.step), el("td", {}, j.id), el("td", {}, j.state),
      el("td", {}, j.progress === null ? "done" : j.progress === undefined ? "-" : Math.round(100 * j.progress) + "%"), el("td", {}, fmt(j.loss, 4)),
      el("td", {}, j.optStep === null ? "-" : String(j.optStep)), el("td", {}, fmt(j.gap, 4)), el("td", {}, fmt(j.entropy, 3)),
      el("td", {}, fmt(j.updateNorm, 4)), el("td", {}, j.seconds ? fmt(j.seconds, 2) : "-"));
    if (j.gap !== null && j.gap > GAP_WARNING && !j.lagged) {
      const td = tr.children[6];
      td.className = "warn";
      td.title = "above " + GAP_WARNING + " nats: the trainer does not score the sampled tokens as the inference server did (chat template, tokenizer, vLLM's --logprobs-mode, temperature)";
    }
    tbody.append(tr);
  }
}

// least and greatest are the extremes of vals and a bound, by a loop:
// spreading a long run's points into Math.min's arguments overflows the
// browser's stack (Chromium's at about 124,000 arguments).
function least(vals, bound) { let m = bound; for (const v of vals) if (v < m) m = v; return m; }
function greatest(vals, bound) { let m = bound; for (const v of vals) if (v > m) m = v; return m; }

// tickStep is the step between x-axis labels: 1, 2 or 5 times a power of
// ten, at least raw and at least 1.
function tickStep(raw) {
  if (raw <= 1) return 1;
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * p).find((v) => v >= raw);
}

// textWidth is the width in CSS pixels of a chart's axis label s (the
// 12 px of .chart text, in svg's font), measured on a canvas: it needs no
// chart shown.
function textWidth(svg, s) {
  textWidth.ctx ||= document.createElement("canvas").getContext("2d");
  textWidth.ctx.font = "12px " + getComputedStyle(svg).fontFamily;
  return textWidth.ctx.measureText(String(s)).width;
}

// chart draws series of [step, value] points with lines, dots, axes and,
// when opts.best is set, a marker on the best step. It draws at the
// chart's width in CSS pixels (640 when it has none, as when it is not
// shown), so that its text is as large on a phone as on a desktop: a
// drawing 640 wide, scaled to a phone, had text 5 px high. The height of
// its viewBox in the page (kept in data-height) is its height when 640
// wide or narrower; a wider one keeps that aspect. The margins left and
// right of the plot fit the widest label of each axis (a right axis
// reading "7.5e-10" ran past the chart's edge in a fixed one).
function chart(svg, series, opts) {
  if (!svg.dataset.height) svg.dataset.height = svg.viewBox.baseVal.height;
  const W = Math.round(svg.clientWidth) || 640;
  const H = Math.round(Number(svg.dataset.height) * Math.max(1, W / 640));
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  const T = 10, B = 26;
  svg.replaceChildren();
  // Zoom: keep the points within [xmin, xmax].
  const xmin = Math.max(0, opts.xmin || 0);
  const xmax = Math.max(opts.xmax || 1, xmin + 1);
  const inRange = (p) => p[0] >= xmin && p[0] <= xmax;
  series = series.map((s) => ({ ...s, pts: s.pts.filter(inRange) }));
  // opts.right is one series or several on the right axis.
  const rights = [].concat(opts.right || []).map((s) => ({ ...s, pts: s.pts.filter(inRange) }));
  if (opts.band) opts = { ...opts, band: opts.band.filter(inRange) };
  if (opts.best !== null && opts.best !== undefined && !inRange([opts.best])) opts = { ...opts, best: null };
  const all = series.flatMap((s) => s.pts.map((p) => p[1])).concat((opts.band || []).flatMap((b) => [b[1], b[2]]));
  let ymin = opts.ymin ?? least(all, 0), ymax = opts.ymax ?? greatest(all, 0.1);
  if (ymax - ymin < 1e-9) ymax = ymin + 1;
  const pad = opts.ymax === undefined ? 0.05 * (ymax - ymin) : 0;
  ymin -= pad; ymax += pad;
  // The axes' labels, then margins that hold them: the left axis's end 4
  // px left of the plot, the right axis's start 4 px right of it, each at
  // least 4 px inside the chart; a step label is centred on its step.
  const leftLabels = [0, 1, 2, 3, 4].map((i) => (ymin + (ymax - ymin) * i / 4).toFixed(2));
  const right = rights.some((s) => s.pts.length > 0) ? rights : null;
  // The right axis only with points to read on it (not 0 to 1e-9).
  const hi = right ? greatest(right.flatMap((s) => s.pts.map((p) => p[1])), right[0].cls === "meals" ? 1 : 1e-9) : 0;
  const rightLabels = right ? [0, 1, 2, 3, 4].map((i) => hi >= 10 ? (hi * i / 4).toFixed(0) : Number((hi * i / 4).toPrecision(2)).toString()) : [];
  const widest = (labels) => greatest(labels.map((s) => textWidth(svg, s)), 0);
  const L = Math.max(48, Math.ceil(widest(leftLabels)) + 8);
  const R = Math.max(opts.right ? 44 : 12, Math.ceil(widest(rightLabels)) + 8, Math.ceil(textWidth(svg, Math.floor(xmax)) / 2) + 4);
  const x = (v) => L + (W - L - R) * (v - xmin) / (xmax - xmin);
  const y = (v, lo = ymin, hi = ymax) => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  for (let i = 0; i <= 4; i++) {
    const v = ymin + (ymax - ymin) * i / 4;
    svg.append(el("svg:line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    svg.append(el("svg:text", { x: L - 4, y: y(v) + 3, "text-anchor": "end" }, leftLabels[i]));
  }
  // A label about every 50 px, as many on every chart of the same width.
  const every = tickStep((xmax - xmin) / Math.max(2, Math.floor((W - 60) / 50)));
  for (let s = Math.ceil(xmin / every) * every; s <= xmax; s += every) svg.append(el("svg:text", { x: x(s), y: H - 10, "text-anchor": "middle" }, s));
  svg.append(el("svg:text", { x: W - R, y: H - 1, "text-anchor": "end" }, "step"));
  svg.append(el("svg:line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  svg.append(el("svg:line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  // The validation curve's 95% confidence band, under the curves.
  if (opts.band && opts.band.length > 0) {
    const b = opts.band;
    const d = b.map((p, i) => (i ? "L" : "M") + x(p[0]) + " " + y(p[2])).join(" ") + " " +
      b.slice().reverse().map((p) => "L" + x(p[0]) + " " + y(p[1])).join(" ") + " Z";
    svg.append(el("svg:path", { class: "band", d }));
  }
  const draw = (s, yf) => {
    if (s.pts.length === 0) return;
    const last = s.pts[s.pts.length - 1];
    // A series with a colour of its own (a compared run) wears it over
    // its class's.
    const stroke = s.color ? { style: "stroke: " + s.color } : {}, fill = s.color ? { style: "fill: " + s.color } : {};
    if (s.label) svg.append(el("svg:text", { class: "label " + s.cls, x: x(last[0]) - 4, y: yf(last[1]) - 5, "text-anchor": "end", ...fill }, s.label));
    svg.append(el("svg:path", { class: s.cls, d: s.pts.map((p, i) => (i ? "L" : "M") + x(p[0]) + " " + yf(p[1])).join(" "), ...stroke }));
    for (const p of s.pts) {
      const c = el("svg:circle", { class: "pt " + s.cls, cx: x(p[0]), cy: yf(p[1]), r: 3.5, "data-step": p[0], "data-value": p[1], ...fill });
      c.append(el("svg:title", {}, (s.label || s.name || s.cls) + " step " + p[0] + ": " + fmt(p[1])));
      svg.append(c);
    }
  };
  for (const s of series) draw(s, (v) => y(v));
  if (right) {
    for (let i = 0; i <= 4; i++) svg.append(el("svg:text", { x: W - R + 4, y: y(hi * i / 4, 0, hi) + 3 }, rightLabels[i]));
    for (const s of right) draw(s, (v) => y(v, 0, hi));
  }
  if (opts.best !== null && opts.best !== undefined) {
    svg.append(el("svg:line", { class: "best", x1: x(opts.best), x2: x(opts.best), y1: T, y2: H - B }));
    const p = series[opts.bestSeries].pts.find((q) => q[0] === opts.best);
    if (p) svg.append(el("svg:circle", { class: "best", cx: x(p[0]), cy: y(p[1]), r: 7, "data-step": p[0] }));
  }
}

// onEvent handles one run event: {type, run, step, time, data}, the form
// docs/EVENTS.md documents.
function onEvent(ev) {
  if (ev.type === "run_started" || ev.type === "run_finished") loadRuns().catch(console.error);
  if (ev.type === "step_committed" || ev.type === "best_changed") updateRow(ev);
  if (ev.run !== state.selected) return;
  switch (ev.type) {
    case "job_state": {
      const j = ev.data;
      const prev = state.jobs[j.id] || {};
      state.jobs[j.id] = { ...jobFigures(null), ...prev, step: ev.step, id: j.id, state: j.state, progress: j.progress,
        ...(j.metrics ? jobFigures(j.metrics) : {}) };
      renderJobs();
      if (state.run) showUnderway(state.run);
      break;
    }
    // With an asynchronous pipeline several steps play at once (a step's
    // validation while the next one trains, later steps' training sampled
    // ahead): each step's episodes are counted apart.
    case "step_started": {
      const p = liveStep(ev.step);
      p.trainTotal = ev.data.episodes;
      p.valTotal = ev.data.validation;
      showProgress();
      break;
    }
    case "episode_finished":
      liveStep(ev.step)[ev.data.split === "validation" ? "val" : "train"]++;
      showProgress();
      break;
    case "validation_done": {
      // The step's validation figure is its mean over every episode.
      const v = ev.data;
      liveStep(ev.step).done = "step " + ev.step + " validation reward " + fmt(v.reward_mean) +
        " [" + fmt(v.reward_ci95[0]) + ", " + fmt(v.reward_ci95[1]) + "] over " + count(v.episodes, "episode");
      showProgress();
      scheduleRefresh();
      break;
    }
    case "step_committed":
      // A committed step's count goes; the last line stays until the
      // next step shows.
      state.committed = Math.max(state.committed, ev.step);
      showProgress();
      scheduleRefresh();
      break;
    case "warning":
      warningEvent(ev);
      showWarnings();
      break;
    case "endpoint_state":
      endpointEvent(ev);
      for (const meanwhile of state.reads) meanwhile.push(ev);
      showEndpoints();
      break;
    case "run_finished":
      state.live = new Map();
      state.committed = -1;
      endpointEvent(ev);
      for (const meanwhile of state.reads) meanwhile.push(ev);
      showEndpoints();
      // running: the daemon stopped; its next start resumes the run.
      $("#progress").textContent = ev.data.state === "running" ? "run interrupted: it resumes when the daemon restarts" : "run " + ev.data.state;
      scheduleRefresh();
      break;
    default:
      scheduleRefresh();
  }
}

// endpointEvent applies an endpoint_state event to the list of endpoints
// down: one drained (its requests go to the others, or wait for it when
// none is left) or readmitted. A run_finished empties it.
function endpointEvent(ev) {
  const d = ev.data;
  if (ev.type === "run_finished") state.endpoints = new Map();
  else if (d.up) state.endpoints.delete(d.endpoint);
  else state.endpoints.set(d.endpoint, { since: state.endpoints.has(d.endpoint) ? state.endpoints.get(d.endpoint).since : ev.time, error: d.error || "",
    probe: d.probe_in_seconds ? new Date(new Date(ev.time).getTime() + 1000 * d.probe_in_seconds) : null, every: d.probe_every_seconds || 0 });
}

// warningEvent notes a warning event of the run (docs/EVENTS.md): one per
// code, the latest, so that a run resumed again shows its start's once.
// Warnings stay until another run is selected: the end-of-run one comes
// just before run_finished, and the run's page should keep saying it.
function warningEvent(ev) {
  if (ev.data && ev.data.message) state.warnings.set(ev.data.code, ev.data.message);
}

// showWarnings lists the run's warnings, each on a line of its own.
function showWarnings() {
  const lines = [...state.warnings.values()].map((m) => "warning: " + m);
  $("#warnings").textContent = lines.join("\n");
  $("#warnings").hidden = lines.length === 0;
}

// showEndpoints lists the run's inference endpoints that are down: since
// when, why, and how often they are probed from when. A failed probe sends
// no event, so the time of the next one is not known here: the first
// probe's time stays true once past.
function showEndpoints() {
  const probed = (e) => !e.probe ? "" :
    " (probed " + (e.every ? "every " + e.every + " s " : "") + "from " + e.probe.toLocaleTimeString() + ")";
  const lines = [...state.endpoints.entries()].map(([url, e]) =>
    "inference endpoint " + url + " down since " + new Date(e.since).toLocaleTimeString() +
    (e.error ? ": " + e.error : "") + probed(e));
  $("#endpoints").textContent = lines.join("\n");
  $("#endpoints").hidden = lines.length === 0;
}

// showUnderway says what run view r has under way, as grpo runs show
// does: the step being validated, the trainer job in flight (with its
// state and progress once a job_state event told them) and the process
// that holds the run's lease; each only when r has it. Without a live
// holder they are what the run left when its process stopped.
function showUnderway(r) {
  const time = (t) => new Date(t).toLocaleTimeString();
  const live = !!(r.lease && r.lease.live);
  const lines = [];
  if (r.validating !== undefined && r.validating !== null) {
    lines.push("step " + r.validating + (live ? ": being validated, not committed yet" : ": was being validated when the run stopped, not committed"));
  }
  const j = r.in_flight;
  if (j && live) {
    const known = state.jobs[j.job_id];
    const st = known && known.state ? " (" + known.state + (known.progress ? ", " + Math.round(100 * known.progress) + "%" : "") + ")" : "";
    lines.push("step " + j.step + ": trainer job " + j.job_id + " in flight" + st + ", submitted " + time(j.submitted));
  } else if (j) {
    lines.push("step " + j.step + ": trainer job " + j.job_id + " submitted " + time(j.submitted) + ", not committed (a resume waits for that job)");
  }
  const l = r.lease;
  // A live holder's heartbeat is renewed every few seconds: a time read
  // at the last redraw would age on the page.
  if (l && live) lines.push("played by pid " + l.pid + " on " + l.host + " since " + time(l.started));
  else if (l) lines.push("not played: pid " + l.pid + " on " + l.host + " no longer renews its lease (last heartbeat " + time(l.heartbeat) + ")");
  $("#underway").textContent = lines.join("\n");
  $("#underway").hidden = lines.length === 0;
}

// liveStep is the episode count of a step not committed yet.
function liveStep(step) {
  if (!state.live.has(step)) state.live.set(step, { train: 0, val: 0, trainTotal: 0, valTotal: 0, done: "" });
  return state.live.get(step);
}

// showProgress says, per step in play, how many of its training and
// validation episodes finished (of how many, when its step_started said).
function showProgress() {
  if ([...state.live.keys()].some((step) => step > state.committed)) {
    for (const step of [...state.live.keys()]) if (step <= state.committed) state.live.delete(step);
  }
  const parts = [...state.live.entries()].sort((a, b) => a[0] - b[0]).map(([step, p]) => {
    if (p.done) return p.done;
    const counts = [];
    const part = (n, total, what) => { if (n || total) counts.push({ text: n + (total ? " of " + total : "") + " " + what, last: total || n }); };
    part(p.train, p.trainTotal, "training");
    part(p.val, p.valTotal, "validation");
    // "1 training episode", "1 of 1 validation episode"; else "episodes".
    const noun = counts.length === 1 && counts[0].last === 1 ? "episode" : "episodes";
    return "step " + step + ": " + (counts.map((c) => c.text).join(", ") || "no") + " " + noun;
  });
  $("#progress").textContent = parts.join(" · ");
}

function connect() {
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
  state.ws = ws;
  ws.onopen = () => { $("#live").textContent = "live"; $("#live").className = "on"; loadRuns().catch(console.error); loadRun().catch(console.error); };
  ws.onmessage = (m) => onEvent(JSON.parse(m.data));
  ws.onclose = () => { $("#live").textContent = "offline"; $("#live").className = "off"; setTimeout(connect, 2000); };
}

function authHeaders() {
  const t = $("#token").value.trim();
  return t ? { Authorization: "Bearer " + t } : {};
}

$("#launch").addEventListener("submit", async (e) => {
  e.preventDefault();
  $("#launch-error").textContent = "";
  try {
    const r = await api("/api/v1/runs", { method: "POST", body: $("#config").value,
      headers: { "Content-Type": "application/yaml", ...authHeaders() } });
    await loadRuns();
    select(r.run);
  } catch (err) {
    $("#launch-error").textContent = err.message;
  }
});

// A refused cancel is said apart from the run's error, which every
// redraw takes from the store.
$("#cancel").addEventListener("click", async () => {
  $("#cancel-error").textContent = "";
  try {
    await api("/api/v1/runs/" + encodeURIComponent(state.selected) + "/cancel", { method: "POST", headers: { "Content-Type": "application/json", ...authHeaders() } });
    scheduleRefresh();
  } catch (err) {
    $("#cancel-error").textContent = "cancel: " + err.message;
    state.actionError = "cancel";
  }
});

// Resume plays the run again in this daemon; a refusal is said where a
// refused cancel is.
$("#resume").addEventListener("click", async () => {
  $("#cancel-error").textContent = "";
  try {
    const body = JSON.stringify({ retry_job: !$("#retry-job-label").hidden && $("#retry-job").checked });
    render(await api("/api/v1/runs/" + encodeURIComponent(state.selected) + "/resume", { method: "POST", body,
      headers: { "Content-Type": "application/json", ...authHeaders() } }));
    $("#retry-job").checked = false;
    scheduleRefresh();
  } catch (err) {
    $("#cancel-error").textContent = "resume: " + err.message;
    state.actionError = "resume";
  }
});

for (const id of ["#smooth", "#xfrom", "#xto"]) $(id).addEventListener("input", () => { if (state.run) render(state.run); });

// The charts are drawn at their width: again when the window's changes.
window.addEventListener("resize", () => {
  clearTimeout(state.resize);
  state.resize = setTimeout(() => { if (state.run) render(state.run); }, 100);
});

// A link to the Grafana dashboard when the daemon names one (serve --grafana-url).
api("/dashboard.json").then((d) => {
  if (d.grafana_url) { $("#grafana").href = d.grafana_url; $("#grafana").hidden = false; }
}).catch(console.error);

// promotable enables Promote only where it can work: a run with a
// selected step that has an adapter (not the base model, step 0) and
// whose config names inference endpoints (the embedded
// backend's server stopped with its run; ART's vLLM is not the run's).
function promotable(r) {
  const btn = $("#promote");
  const eps = (r.config && r.config.inference && r.config.inference.endpoints) || [];
  let why = "";
  if (!r.best) why = "no step is selected yet";
  else if (!r.best.adapter) why = "the selected step " + r.best.step + " is the base model: no adapter to load";
  else if (eps.length === 0) why = "the run names no inference endpoint (embedded backend or ART): use grpo promote --endpoint URL";
  btn.disabled = why !== "";
  btn.title = why ? "cannot promote: " + why : btn.dataset.title;
}

// Promote: load the selected step's adapter into the run's endpoints
// under RUN-best, and say what each endpoint did.
$("#promote").addEventListener("click", async () => {
  const out = $("#promote-result");
  out.className = "";
  out.textContent = "promoting " + state.selected + "…";
  try {
    const r = await api("/api/v1/runs/" + encodeURIComponent(state.selected) + "/promote",
      { method: "POST", body: "{}", headers: { "Content-Type": "application/json", ...authHeaders() } });
    out.textContent = "step " + r.step + " served as " + r.name + ": " +
      r.endpoints.map((e) => e.url + " " + e.action).join(", ");
  } catch (err) {
    out.className = "error";
    out.textContent = "promote: " + err.message;
  }
});

loadRuns().catch((err) => { $("#empty").textContent = "cannot list runs: " + err.message; });
connect();
