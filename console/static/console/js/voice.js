// Voice playground: a duplex conversation over the OpenAI Realtime protocol (/v1/realtime).
// The microphone streams in as 24 kHz PCM16 (server VAD finds the turns); the answer plays as
// its audio deltas arrive; speaking over the answer stops playback and truncates the item to
// what was heard. Everything from the server goes into the page as text, never as HTML.
import { Microphone } from "./microphone.js";
import { el, preselectDeployment } from "./ui.js";
import { VoicePlayer } from "./voice_player.js";

const RATE = 24000;
const CONNECT_TIMEOUT_MS = 15000;
const STATES = {
  idle: "Not connected.",
  connecting: "Connecting…",
  listening: "Listening: speak now.",
  hearing: "Hearing you…",
  thinking: "Thinking…",
  answering: "Answering: speak to interrupt.",
  error: "Stopped after an error.",
};

const form = document.getElementById("voice-form");
const startButton = document.getElementById("voice-start");
const stopButton = document.getElementById("voice-stop");
const status = document.getElementById("voice-status");
const statusText = document.getElementById("voice-status-text");
const errorBox = document.getElementById("voice-error");
const log = document.getElementById("voice-log");
const level = document.getElementById("voice-level");
const stats = document.getElementById("voice-stats");

let session = null;

preselectDeployment();

function setState(state, detail = "") {
  status.dataset.voiceState = state;
  statusText.textContent = detail || STATES[state];
}

function showError(message) {
  errorBox.textContent = message;
}

function count(name, by = 1) {
  stats.dataset[name] = String(Number(stats.dataset[name] || 0) + by);
}

class VoiceSession {
  constructor(deployment, settings) {
    this.deployment = deployment;
    this.settings = settings;
    this.context = new AudioContext({ latencyHint: "interactive" });
    this.context.resume(); // inside the click: browsers only start audio on a user gesture
    this.player = new VoicePlayer(this.context, RATE);
    this.microphone = new Microphone(this.context, (pcm, rms) => this.onMicrophone(pcm, rms), { rate: RATE });
    this.ws = null;
    this.ready = false;
    this.stopped = false;
    this.failed = false;
    this.sentSamples = 0;
    this.response = null; // {id, itemId, done}
    this.lastAudioItem = null;
    this.pendingTruncate = null;
    this.userTurns = new Map(); // item id -> its bubble
    this.replies = new Map(); // item id -> {bubble, text, meta}
    this.ticker = setInterval(() => this.tick(), 200);
  }

  async start() {
    setState("connecting");
    await this.connect();
    await this.microphone.start();
    if (!this.stopped) setState("listening");
  }

  connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const url = `${scheme}://${location.host}/v1/realtime?model=${encodeURIComponent(this.deployment)}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("The realtime session did not start in time.")), CONNECT_TIMEOUT_MS);
      this.ws = new WebSocket(url, ["realtime"]);
      this.ws.onmessage = (message) => {
        const event = JSON.parse(message.data);
        if (event.type === "session.created") { clearTimeout(timer); resolve(); }
        if (event.type === "error" && !this.ready) { clearTimeout(timer); reject(new Error(event.error?.message || "refused")); }
        this.onEvent(event);
      };
      this.ws.onerror = () => { clearTimeout(timer); reject(new Error("Could not connect to /v1/realtime.")); };
      this.ws.onclose = (close) => { clearTimeout(timer); this.onClose(close); reject(new Error(closeReason(close))); };
    });
  }

  send(type, fields = {}) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type, ...fields }));
  }

  onMicrophone(pcm, rms) {
    level.style.width = `${Math.min(100, Math.round(Math.sqrt(rms) * 200))}%`;
    if (!this.ready || this.stopped) return;
    this.send("input_audio_buffer.append", { audio: base64OfPcm(pcm) });
    this.sentSamples += pcm.length;
    count("micChunks");
    document.getElementById("voice-sent").textContent = `${(this.sentSamples / RATE).toFixed(1)} s of audio`;
  }

  onEvent(event) {
    const handler = HANDLERS[event.type];
    if (handler) handler.call(this, event);
  }

  // ------------------------------------------------------------------ turns

  onSessionCreated(event) {
    this.ready = true;
    this.showFormats(event.session);
    const update = { type: "realtime" };
    if (this.settings.instructions) update.instructions = this.settings.instructions;
    if (this.settings.voice) update.audio = { output: { voice: this.settings.voice } };
    if (Object.keys(update).length > 1) this.send("session.update", { session: update });
  }

  showFormats(config) {
    const input = config?.audio?.input?.format;
    const output = config?.audio?.output?.format;
    if (!input || !output) return;
    const describe = (format) => `${format.type}${format.rate ? ` ${format.rate / 1000} kHz` : ""}`;
    const [heard, spoken] = [describe(input), describe(output)];
    document.getElementById("voice-formats").textContent = heard === spoken ? `${heard} both ways` : `in ${heard}, out ${spoken}`;
  }

  onRateLimits(event) {
    const minutes = (event.rate_limits || []).find((entry) => entry.name === "realtime_minutes");
    document.getElementById("voice-minutes").textContent = minutes
      ? `${Number(minutes.remaining).toFixed(1)} of ${minutes.limit} left`
      : "no limit";
  }

  onSpeechStarted(event) {
    this.bargeIn();
    setState("hearing");
    log.querySelector(".empty")?.remove();
    const bubble = el("div", { class: "msg user", "data-user-turn": event.item_id || "" }, "You are speaking…");
    bubble.dataset.startMs = String(event.audio_start_ms ?? "");
    this.userTurns.set(event.item_id, bubble);
    this.append(bubble);
  }

  onSpeechStopped(event) {
    setState("thinking");
    const bubble = this.userTurns.get(event.item_id);
    if (!bubble) return;
    const seconds = (event.audio_end_ms - Number(bubble.dataset.startMs)) / 1000;
    bubble.textContent = Number.isFinite(seconds) && seconds > 0 ? `You spoke (${seconds.toFixed(1)} s)` : "You spoke";
  }

  onItemAdded(event) {
    const item = event.item || {};
    if (item.role !== "user") return;
    const bubble = this.userTurns.get(item.id);
    const text = (item.content || []).map((part) => part.text || part.transcript || "").join(" ").trim();
    if (bubble && text) bubble.textContent = text;
  }

  // The user spoke over an answer: silence it now and tell the server what was heard.
  bargeIn() {
    const answering = this.response && !this.response.done;
    const itemId = answering ? this.response.itemId : this.player.playing ? this.lastAudioItem : null;
    const reply = this.replies.get(itemId);
    if (!itemId || !reply) return;
    const heardMs = Math.min(this.player.playedMs(itemId), this.player.receivedMs(itemId));
    const hadAudio = this.player.receivedMs(itemId) > 0;
    this.player.stop();
    reply.note = `interrupted after ${heardMs} ms`;
    reply.bubble.classList.add("interrupted");
    this.renderMeta(reply);
    if (!hadAudio) return; // nothing was heard: there is no audio to truncate
    const truncate = { item_id: itemId, content_index: this.player.contentIndex(itemId), audio_end_ms: heardMs };
    if (answering) this.pendingTruncate = truncate; // sent once the response has ended (response.done)
    else this.send("conversation.item.truncate", truncate);
  }

  // ------------------------------------------------------------------ responses

  onResponseCreated(event) {
    this.response = { id: event.response?.id, itemId: null, done: false };
    setState("answering");
  }

  onOutputItemAdded(event) {
    const item = event.item || {};
    if (this.response) this.response.itemId = item.id;
    log.querySelector(".empty")?.remove();
    const bubble = el("div", { class: "msg assistant", "data-reply": item.id || "" });
    const text = el("span", { "data-transcript": "" });
    const meta = el("div", { class: "meta" }, "…");
    bubble.append(text, meta);
    this.replies.set(item.id, { bubble, text, meta, status: "", note: "" });
    this.append(bubble);
  }

  onTranscriptDelta(event) {
    const reply = this.replies.get(event.item_id);
    if (!reply) return;
    reply.text.textContent += event.delta || "";
    log.scrollTop = log.scrollHeight;
  }

  onAudioDelta(event) {
    this.player.push(event.delta, event.item_id, event.content_index || 0);
    this.lastAudioItem = event.item_id;
    stats.dataset.audioChunks = String(this.player.chunks);
    stats.dataset.audioSamples = String(this.player.samples);
    document.getElementById("voice-received").textContent = `${(this.player.samples / RATE).toFixed(2)} s of audio`;
  }

  onResponseDone(event) {
    const response = event.response || {};
    const reply = this.replies.get(this.response?.itemId);
    if (this.response) this.response.done = true;
    if (response.status === "completed") count("turns");
    if (reply) {
      const tokens = response.usage ? `${response.usage.output_tokens} output tokens` : "";
      reply.status = [response.status, tokens].filter(Boolean).join(" · ");
      this.renderMeta(reply);
    }
    if (response.status === "failed") {
      const problem = response.status_details?.error;
      showError(`The response failed: ${problem?.message || problem?.code || "unknown error"}`);
    }
    if (this.pendingTruncate) {
      this.send("conversation.item.truncate", this.pendingTruncate);
      this.pendingTruncate = null;
    }
    if (status.dataset.voiceState === "answering" && !this.player.playing) setState("listening");
  }

  onTruncated(event) {
    count("interruptions");
    const reply = this.replies.get(event.item_id);
    if (!reply) return;
    reply.note = `interrupted: heard ${event.audio_end_ms} ms`;
    this.renderMeta(reply);
  }

  renderMeta(reply) {
    reply.meta.textContent = [reply.status, reply.note].filter(Boolean).join(" · ") || "…";
  }

  onServerError(event) {
    const error = event.error || {};
    showError(`${error.message || "Error"}${error.code ? ` (${error.code})` : ""}`);
  }

  tick() {
    stats.dataset.playedMs = String(this.player.totalPlayedMs());
    const answering = this.response && !this.response.done;
    if (status.dataset.voiceState === "answering" && !answering && !this.player.playing) setState("listening");
  }

  append(node) {
    log.append(node);
    log.scrollTop = log.scrollHeight;
  }

  // ------------------------------------------------------------------ ending

  onClose(close) {
    const expected = this.stopped;
    this.teardown();
    if (!expected) {
      this.failed = true;
      if (!errorBox.textContent) showError(closeReason(close));
      setState("error");
      finished();
    }
  }

  stop() {
    this.stopped = true;
    this.ws?.close(1000, "stopped by the user");
    this.teardown();
    setState("idle");
  }

  teardown() {
    clearInterval(this.ticker);
    this.ready = false;
    this.microphone.stop();
    this.player.stop();
    level.style.width = "0%";
    this.context.close().catch(() => {});
  }
}

const HANDLERS = {
  "session.created": VoiceSession.prototype.onSessionCreated,
  "session.updated": function (event) { this.showFormats(event.session); },
  "rate_limits.updated": VoiceSession.prototype.onRateLimits,
  "input_audio_buffer.speech_started": VoiceSession.prototype.onSpeechStarted,
  "input_audio_buffer.speech_stopped": VoiceSession.prototype.onSpeechStopped,
  "conversation.item.added": VoiceSession.prototype.onItemAdded,
  "response.created": VoiceSession.prototype.onResponseCreated,
  "response.output_item.added": VoiceSession.prototype.onOutputItemAdded,
  "response.output_audio_transcript.delta": VoiceSession.prototype.onTranscriptDelta,
  "response.output_text.delta": VoiceSession.prototype.onTranscriptDelta,
  "response.output_audio.delta": VoiceSession.prototype.onAudioDelta,
  "response.done": VoiceSession.prototype.onResponseDone,
  "conversation.item.truncated": VoiceSession.prototype.onTruncated,
  error: VoiceSession.prototype.onServerError,
};

function closeReason(close) {
  if (close.code === 1006) return "The connection to the server was lost.";
  return `The session ended (${close.code}${close.reason ? `: ${close.reason}` : ""}).`;
}

function base64OfPcm(pcm) {
  const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

function finished() {
  session = null;
  startButton.disabled = false;
  stopButton.disabled = true;
  form.querySelector("#deployment").disabled = false;
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const deployment = form.querySelector("#deployment").value;
  form.querySelector("[data-error-for='deployment']").textContent = deployment ? "" : "Pick a running deployment.";
  if (!deployment || session) return;
  showError("");
  startButton.disabled = true;
  stopButton.disabled = false;
  form.querySelector("#deployment").disabled = true;
  const settings = { instructions: form.querySelector("#instructions").value.trim(), voice: form.querySelector("#voice").value };
  session = new VoiceSession(deployment, settings);
  const current = session;
  try {
    await current.start();
  } catch (error) {
    if (current.stopped || current.failed) return; // stopped by the user, or already reported
    showError(error.message);
    current.stop();
    setState("error");
    finished();
  }
});

stopButton.addEventListener("click", () => {
  if (!session) return;
  session.stop();
  finished();
});
