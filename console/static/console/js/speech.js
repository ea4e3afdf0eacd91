// Speech playground: text in, audio out (played as it streams), then play and download.
import { PcmPlayer } from "./audio_stream.js";
import { PlaygroundSocket } from "./socket.js";
import { clearErrors, el, formValues, historyLink, preselectDeployment, showCode, showFieldError, timings, wireCodeTabs } from "./ui.js";

const socket = new PlaygroundSocket();
const form = document.getElementById("speech-form");
const result = document.getElementById("speech-result");

wireCodeTabs();
preselectDeployment();

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearErrors(form);
  const values = formValues(form);
  const player = new PcmPlayer();
  player.unlock();
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  result.replaceChildren(el("p", { class: "muted" }, "generating…"));
  await socket.run("speech", values.deployment, values, (message) => {
    if (message.type === "started") showCode(message.code);
    else if (message.type === "audio") { player.push(message.pcm, message.sample_rate); result.firstChild.textContent = `streaming… ${player.seconds.toFixed(2)} s`; }
    else if (message.type === "done") {
      button.disabled = false;
      const url = URL.createObjectURL(player.wavBlob());
      const info = el("p", { class: "small muted" }, `${player.seconds.toFixed(2)} s of audio · ${timings(message.metrics)} · `);
      info.append(historyLink(message.request_id));
      const audio = el("audio", { controls: "", src: url, "data-speech-audio": "" });
      const file = player.download(values.response_format);
      const download = el("a", { class: "btn", href: URL.createObjectURL(file.blob), download: `speech-${message.request_id}.${file.extension}` }, `Download ${file.extension.toUpperCase()}`);
      result.replaceChildren(info, audio, el("div", { style: "margin-top:10px" }), download);
    } else if (message.type === "error") {
      button.disabled = false;
      result.replaceChildren();
      showFieldError(form, message);
    }
  });
});
