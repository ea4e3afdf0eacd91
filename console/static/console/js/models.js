// The Models page: imports' progress, pushed over /ws/console/models/ while they run.
const UNITS = ["bytes", "KB", "MB", "GB", "TB"];

function size(bytes) {
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) { value /= 1024; unit += 1; }
  return unit === 0 ? `${value} bytes` : `${value.toFixed(1)} ${UNITS[unit]}`;
}

function rowOf(name) {
  return [...document.querySelectorAll("tr[data-model]")].find((row) => row.dataset.model === name) || null;
}

function showProgress(row, event) {
  const cell = row.querySelector("[data-import-state]");
  let bar = cell.querySelector("[data-progress]");
  if (!bar) {
    cell.textContent = "";
    bar = document.createElement("div");
    bar.className = "progress";
    bar.dataset.progress = "";
    bar.appendChild(document.createElement("span"));
    const text = document.createElement("span");
    text.className = "muted";
    text.dataset.progressText = "";
    cell.append(bar, text);
  }
  const percent = event.bytes_total ? Math.min(100, (100 * event.bytes_done) / event.bytes_total) : 0;
  bar.title = `${percent.toFixed(1)}%`;
  bar.firstElementChild.style.width = `${percent}%`;
  bar.dataset.bytesDone = String(event.bytes_done);
  cell.querySelector("[data-progress-text]").textContent =
    `${size(event.bytes_done)} / ${size(event.bytes_total)} · ${event.files_done}/${event.files_total} files`;
}

function apply(event) {
  const row = rowOf(event.name);
  if (!row) {
    if (event.status === "importing") location.reload(); // started elsewhere: list it
    return;
  }
  const before = row.dataset.status;
  row.dataset.status = event.status;
  if (event.status === "importing") showProgress(row, event);
  else if (event.status === "deleted") row.remove();
  else if (event.status !== before) location.reload(); // ready: its family, size and source; failed: why, and Retry
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/ws/console/models/`);
  socket.onmessage = (message) => apply(JSON.parse(message.data));
  socket.onclose = () => setTimeout(connect, 2000);
}

connect();
