// Deployment page charts (uPlot): latency percentiles and throughput over the last hour or day,
// and each stage's queue depth and running requests, sampled every poll since the page opened.
const POLL_MS = 5000;
const MAX_SAMPLES = 720;  // an hour of 5 s samples
const STAGE_MIN_SPAN_S = 60;  // the stage chart spans at least its last minute (one sample has no span)
const LATENCY = [["ttft_s", "TTFT", "#4f46e5"], ["ttfp_s", "TTFP", "#0891b2"], ["e2el_s", "E2EL", "#d97706"]];
const STAGE_COLORS = ["#4f46e5", "#0891b2", "#d97706", "#12805c", "#b42318", "#7c3aed", "#be185d"];
const MEASURES = [["queue_depth", "queue"], ["running", "running"], ["batch_size", "batch"]];

const root = document.querySelector("[data-charts]");
if (root && window.uPlot) start(root);

function start(root) {
  const state = { window: "hour", charts: {}, samples: { t: [], values: {} }, polls: 0 };
  window.omniCharts = state;  // the charts and their data, for the browser tests
  for (const button of root.querySelectorAll("[data-window]")) {
    button.addEventListener("click", () => {
      state.window = button.dataset.window;
      for (const other of root.querySelectorAll("[data-window]")) {
        const on = other === button;
        other.setAttribute("aria-pressed", String(on));
        other.classList.toggle("primary", on);
      }
      refresh(root, state);
    });
  }
  window.addEventListener("resize", () => {
    for (const [name, chart] of Object.entries(state.charts)) chart.setSize(size(host(root, name)));
  });
  refresh(root, state);
  setInterval(() => { if (!document.hidden) refresh(root, state); }, POLL_MS);
}

async function refresh(root, state) {
  const asked = state.window;
  let body;
  try {
    const response = await fetch(`${root.dataset.url}?window=${asked}`, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    body = await response.json();
  } catch (error) {
    root.querySelector("[data-chart-summary]").textContent = `Could not load the charts: ${error.message}`;
    return;
  }
  if (asked !== state.window) return;  // the toggle moved on meanwhile
  const series = body.series;
  summarize(root, series);
  draw(root, state, "latency", latencySeries(), [series.times, ...latencyData(series)], seconds);
  draw(root, state, "throughput", throughputSeries(), [series.times, series.completed_per_min, series.failed_per_min], perMin);
  sample(state, body.stages);
  const stageNames = Object.keys(state.samples.values);
  draw(root, state, "stages", stageSeries(state.samples), [state.samples.t, ...stageData(state.samples)], count,
    stageNames.join("|"), STAGE_MIN_SPAN_S);
  state.polls += 1;
  root.dataset.polls = String(state.polls);
  root.dataset.shownWindow = series.window;
}

function summarize(root, series) {
  const totals = series.totals;
  const ended = (totals.failed || 0) + (totals.cancelled || 0);
  const element = root.querySelector("[data-chart-summary]");
  element.textContent = `${totals.completed || 0} completed · ${ended} failed or cancelled · last ${series.window}`;
  element.dataset.completed = String(totals.completed || 0);
  element.dataset.failed = String(ended);
}

function latencySeries() {
  const lines = [{}];
  for (const [, label, color] of LATENCY) {
    lines.push({ label: `${label} p50`, stroke: color, width: 2, spanGaps: true, points: { show: true, size: 4 }, value: fmt(seconds) });
    lines.push({ label: `${label} p95`, stroke: color, width: 1.5, dash: [5, 4], spanGaps: true, points: { show: true, size: 3 }, value: fmt(seconds) });
  }
  return lines;
}

function latencyData(series) {
  return LATENCY.flatMap(([field]) => [series.latency[field].p50, series.latency[field].p95]);
}

function throughputSeries() {
  return [{},
    { label: "completed", stroke: "#12805c", fill: "rgba(18,128,92,.12)", width: 2, value: fmt(perMin) },
    { label: "failed or cancelled", stroke: "#b42318", fill: "rgba(180,35,24,.10)", width: 1.5, value: fmt(perMin) }];
}

function sample(state, stages) {
  const samples = state.samples;
  samples.t.push(stages.at);
  const seen = new Set();
  for (const [stage, measures] of Object.entries(stages.load)) {
    for (const [measure] of MEASURES) {
      if (!(measure in measures)) continue;
      const key = `${stage}\u0000${measure}`;
      seen.add(key);
      if (!(key in samples.values)) samples.values[key] = new Array(samples.t.length - 1).fill(null);
      samples.values[key].push(measures[measure]);
    }
  }
  for (const [key, values] of Object.entries(samples.values)) if (!seen.has(key)) values.push(null);
  if (samples.t.length > MAX_SAMPLES) {
    samples.t.shift();
    for (const values of Object.values(samples.values)) values.shift();
  }
}

function stageSeries(samples) {
  const stages = [...new Set(Object.keys(samples.values).map((key) => key.split("\u0000")[0]))];
  const lines = [{}];
  for (const key of Object.keys(samples.values)) {
    const [stage, measure] = key.split("\u0000");
    const color = STAGE_COLORS[stages.indexOf(stage) % STAGE_COLORS.length];
    const label = MEASURES.find(([name]) => name === measure)[1];
    lines.push({ label: `${stage} ${label}`, stroke: color, width: measure === "queue_depth" ? 2 : 1.5,
      dash: measure === "queue_depth" ? undefined : [5, 4], value: fmt(count) });
  }
  return lines;
}

function stageData(samples) {
  return Object.values(samples.values);
}

function draw(root, state, name, lines, data, unit, shape = "", minSpan = 0) {
  const element = host(root, name);
  const existing = state.charts[name];
  if (existing && existing.shape === shape && existing.series.length === lines.length) {
    existing.setData(data);
  } else {
    if (existing) existing.destroy();
    const options = {
      ...size(element),
      series: lines,
      scales: {
        x: { time: true, range: (u, min, max) => (max - min < minSpan ? [max - minSpan, max] : [min, max]) },
        y: { range: (u, min, max) => [0, Math.max(max || 0, unit === seconds ? 0.01 : 1) * 1.1] },
      },
      axes: [{}, { values: (u, ticks) => ticks.map(unit), size: 60 }],
      legend: { live: true },
    };
    state.charts[name] = new window.uPlot(options, data, element);
    state.charts[name].shape = shape;
  }
  element.dataset.points = String(data.slice(1).reduce((n, values) => n + values.filter((v) => v != null).length, 0));
}

function host(root, name) {
  return root.querySelector(`[data-chart='${name}']`);
}

function size(element) {
  return { width: Math.max(element.clientWidth, 240), height: 200 };
}

function fmt(unit) {
  return (u, value) => (value == null ? "–" : unit(value));
}

function seconds(value) {
  return value >= 10 ? `${value.toFixed(1)} s` : value >= 1 ? `${value.toFixed(2)} s` : `${(value * 1000).toFixed(0)} ms`;
}

function perMin(value) {
  return `${Number(value.toFixed(2))}/min`;
}

function count(value) {
  return String(Math.round(value * 100) / 100);
}
