// Chat playground: streaming text and audio that plays from its first chunk.
import { PcmPlayer } from "./audio_stream.js";
import { PlaygroundSocket } from "./socket.js";
import { clearErrors, el, formValues, historyLink, preselectDeployment, readAsDataUrl, showCode, showFieldError, timings, wireCodeTabs } from "./ui.js";

const socket = new PlaygroundSocket();
const form = document.getElementById("chat-form");
const log = document.getElementById("chat-log");
const stop = document.getElementById("chat-stop");
const turns = [];
let current = null;

wireCodeTabs();
preselectDeployment();

// The newest reply stays in sight: the log scrolls to its end, and the page scrolls the log's end
// into the window, also when the reply grows after its text (its audio player, its links).
function showLatest(node) {
  log.scrollTop = log.scrollHeight;
  node.scrollIntoView({ block: "nearest" });
}

async function attachments() {
  const files = [...document.getElementById("attachments").files];
  return Promise.all(files.map(async (file) => ({
    kind: file.type.startsWith("audio/") ? "audio" : "image",
    name: file.name,
    data: await readAsDataUrl(file),
  })));
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearErrors(form);
  const values = formValues(form);
  const player = new PcmPlayer();
  player.unlock();
  const input = { ...values, attachments: await attachments(), history: turns.slice(-20) };
  log.querySelector(".empty")?.remove();
  log.append(el("div", { class: "msg user" }, values.prompt));
  const reply = el("div", { class: "msg assistant", "data-reply": "" });
  const text = el("span", { "data-text": "" });
  const meta = el("div", { class: "meta" }, "…");
  reply.append(text, meta);
  log.append(reply);
  showLatest(reply);
  form.querySelector("button[type=submit]").disabled = true;
  stop.disabled = false;
  current = await socket.run("chat", values.deployment, input, (message) => {
    if (message.type === "started") { showCode(message.code); reply.dataset.requestId = message.request_id; }
    else if (message.type === "text") { text.textContent += message.delta; showLatest(reply); }
    else if (message.type === "audio") { player.push(message.pcm, message.sample_rate); meta.textContent = `playing audio… ${player.seconds.toFixed(2)} s`; }
    else if (message.type === "done") finish(message);
    else if (message.type === "cancelled") { finish(null); meta.textContent = "stopped"; }
    else if (message.type === "error") { finish(null); meta.textContent = ""; reply.classList.add("error"); text.textContent = text.textContent || ""; reply.append(el("div", { class: "field-error" }, message.message)); showFieldError(form, message); }
  });

  function finish(done) {
    form.querySelector("button[type=submit]").disabled = false;
    stop.disabled = true;
    current = null;
    if (!done) return;
    turns.push({ role: "user", content: values.prompt }, { role: "assistant", content: text.textContent });
    meta.textContent = [timings(done.metrics), done.finish_reason].filter(Boolean).join(" · ") + " · ";
    meta.append(historyLink(done.request_id));
    if (player.samples) {
      const url = URL.createObjectURL(player.wavBlob());
      const audio = el("audio", { controls: "", src: url, "data-reply-audio": "" });
      const file = player.download(values.audio_format);
      const download = el("a", { href: URL.createObjectURL(file.blob), download: `${done.request_id}.${file.extension}`, class: "small" }, `download ${file.extension.toUpperCase()}`);
      reply.append(audio, download);
      audio.addEventListener("loadedmetadata", () => showLatest(reply), { once: true });
    }
    showLatest(reply);
    form.querySelector("[name=prompt]").value = "";
  }
});

stop.addEventListener("click", () => { if (current) socket.cancel(current); });
