// The Status view (admin keys): the engine's load and recent latencies from GET /v1/status,
// refreshed every few seconds, with a chart of the last minutes.

import { $, api, el, plural } from "./common.js";

const STATUS_EVERY_MS = 2000;
const CHART_SAMPLES = 90;

let timer = null;
const samples = [];

export function stopStatus() {
  clearInterval(timer);
  timer = null;
}

export function startStatus() {
  stopStatus();
  refreshStatus();
  timer = setInterval(refreshStatus, STATUS_EVERY_MS);
}

function percent(value) {
  return value === null || value === undefined ? "–" : `${(100 * value).toFixed(1)}%`;
}

async function refreshStatus() {
  let status;
  try {
    status = await api("/v1/status");
  } catch (error) {
    $("#latency-note").textContent = `Cannot read the status: ${error.message}`;
    return;
  }
  const figures = [
    ["Running", status.running],
    ["Waiting", status.waiting],
    ["KV cache used", percent(status.kv_cache_usage)],
    ["Prefix cache hits", percent(status.prefix_cache_hit_rate)],
    ["Output tokens/s", status.recent.output_tokens_per_s],
    ["Preemptions", status.preemptions],
  ];
  $("#status-figures").replaceChildren(
    ...figures.map(([name, value]) => el("div", {}, el("dt", {}, name), el("dd", {}, String(value)))),
  );
  const rows = [["Time to first token", "ttft_ms"], ["Time per output token", "tpot_ms"],
    ["Request (end to end)", "e2e_ms"]];
  const cell = (v) => el("td", {}, v === null ? "–" : String(v));
  $("#latency-table tbody").replaceChildren(
    ...rows.map(([name, key]) => {
      const p = status.recent[key];
      return el("tr", {}, el("th", { scope: "row" }, name), cell(p.p50), cell(p.p90), cell(p.p99));
    }),
  );
  $("#latency-note").textContent =
    `${status.recent.finished} requests finished in the last ${status.recent.window_s / 60} minutes · model ${status.model}`;
  samples.push(status);
  if (samples.length > CHART_SAMPLES) samples.shift();
  drawChart();
}

function drawChart() {
  const canvas = $("#status-chart");
  const context = canvas.getContext("2d");
  const { width, height } = canvas;
  const box = { left: 8, top: 22, right: width - 8, bottom: height - 22 };
  context.clearRect(0, 0, width, height);
  context.strokeStyle = "#c9d0d8";
  context.lineWidth = 1;
  context.strokeRect(box.left, box.top, box.right - box.left, box.bottom - box.top);
  const most = Math.max(1, ...samples.map((s) => Math.max(s.running, s.waiting)));
  // The newest sample sits at the right edge; older ones move left as new ones arrive.
  const step = (box.right - box.left) / (CHART_SAMPLES - 1);
  const x = (i) => box.right - (samples.length - 1 - i) * step;
  const y = (fraction) => box.bottom - (box.bottom - box.top) * fraction;
  const line = (color, value) => {
    context.strokeStyle = color;
    context.lineWidth = 2;
    context.beginPath();
    samples.forEach((s, i) => (i ? context.lineTo : context.moveTo).call(context, x(i), y(value(s))));
    context.stroke();
  };
  line("#0b57d0", (s) => s.running / most);
  line("#b3261e", (s) => s.waiting / most);
  line("#146c2e", (s) => s.kv_cache_usage);
  context.fillStyle = "#4a5360";
  context.font = "12px system-ui, sans-serif";
  context.fillText(`top: ${plural(most, "request")}, 100% KV`, box.left, 14);
  const seconds = Math.round(((CHART_SAMPLES - 1) * STATUS_EVERY_MS) / 1000);
  context.fillText(`${seconds} s ago`, box.left, height - 6);
  context.textAlign = "right";
  context.fillText("now", box.right, height - 6);
  context.textAlign = "left";
}
