"""JavaScript the browser tests run in a console page to watch what it receives and shows.

Times are the page's performance.now() clock (ms), so they can be compared with each other and
with window.omniAudio.startedAt; no test asserts how long anything takes.
"""

# An init script: every playground socket event as {type, t, size} in window.socketEvents, noted
# before the page's own handler runs (the listener is added in the constructor, before onmessage).
RECORD_SOCKET_EVENTS = """
window.socketEvents = [];
const PageWebSocket = window.WebSocket;
window.WebSocket = class extends PageWebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener("message", (message) => {
      const event = JSON.parse(message.data);
      const size = event.type === "text" ? event.delta.length : 0;
      window.socketEvents.push({ type: event.type, t: performance.now(), size, delta: event.delta ?? null });
    });
  }
};
"""

# The lengths the reply's text went through, as the page showed them: [{t, length}].
WATCH_REPLY_TEXT = """() => {
  window.replyLengths = [];
  const log = document.getElementById("chat-log");
  new MutationObserver(() => {
    const text = log.querySelector("[data-reply] [data-text]");
    const length = text ? text.textContent.length : 0;
    const last = window.replyLengths.at(-1);
    if (length && (!last || last.length !== length)) window.replyLengths.push({ t: performance.now(), length });
  }).observe(log, { subtree: true, characterData: true, childList: true });
}"""

# The widths (percent) progress bars matching a selector went through: window.barWidths[key] =
# [{t, width}], keyed by the video job's ref for bars in a job row, else by the selector.
WATCH_BARS = """(selector) => {
  window.barWidths = {};
  new MutationObserver((changes) => {
    for (const { target } of changes) {
      if (!target.matches?.(selector)) continue;
      const key = target.closest("[data-job]")?.dataset.ref ?? selector;
      const widths = (window.barWidths[key] ??= []);
      const width = parseFloat(target.style.width || "0");
      if (widths.at(-1)?.width !== width) widths.push({ t: performance.now(), width });
    }
  }).observe(document.body, { subtree: true, attributes: true, attributeFilter: ["style"] });
}"""

# An audio or video element plays: resolves with its duration and a playback position past 0.
PLAYS = """(element) => new Promise((resolve, reject) => {
  const done = () => resolve({ duration: element.duration, currentTime: element.currentTime,
                               width: element.videoWidth ?? null });
  element.addEventListener("timeupdate", () => { if (element.currentTime > 0) done(); });
  element.addEventListener("error", () => reject(new Error(`media error ${element.error?.code}: ${element.error?.message}`)));
  element.muted = true;
  element.play().catch(reject);
})"""

# Decode an audio element's file with Web Audio: its duration in seconds.
DECODED_DURATION = """async (element) => {
  const bytes = await (await fetch(element.src)).arrayBuffer();
  const decoded = await new OfflineAudioContext(1, 1, 24000).decodeAudioData(bytes);
  return decoded.duration;
}"""

# Put a deployment option with this name into the playground's select and choose it.
CHOOSE_DEPLOYMENT = """(name) => {
  const select = document.getElementById("deployment");
  select.add(new Option(name, name));
  select.value = name;
}"""
