// Video playground: a queue of jobs, each with its progress, playable when done.
import { PlaygroundSocket } from "./socket.js";
import { clearErrors, el, formValues, historyLink, preselectDeployment, showCode, showFieldError, timings, wireCodeTabs } from "./ui.js";

const socket = new PlaygroundSocket();
const form = document.getElementById("video-form");
const jobs = document.getElementById("jobs");

wireCodeTabs();
preselectDeployment();
applyFrameDefaults();
document.getElementById("deployment").addEventListener("change", applyFrameDefaults);

// The frame count a video family's engines accept is 4k + 1 (its published frame_multiple): the
// field starts on the chosen deployment's default and steps by its multiple.
function applyFrameDefaults() {
  const option = document.getElementById("deployment").selectedOptions[0];
  const frames = document.getElementById("num_frames");
  if (!option?.dataset.numFrames) return;
  const multiple = Number(option.dataset.frameMultiple);
  frames.value = option.dataset.numFrames;
  frames.step = String(multiple);
  document.getElementById("num-frames-help").textContent = multiple > 1 ? `${multiple}k + 1 frames` : "";
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearErrors(form);
  const values = formValues(form);
  jobs.querySelector(".empty")?.remove();
  const row = el("div", { class: "job", "data-job": "" });
  const title = el("div", {}, values.prompt);
  const bar = el("div", { class: "progress" });
  const fill = el("span");
  bar.append(fill);
  const state = el("span", { class: "badge queued" }, "queued");
  row.append(title, bar, state);
  jobs.prepend(row);
  let cancel = null;
  const ref = await socket.run("video", values.deployment, values, (message) => {
    if (["done", "error", "cancelled"].includes(message.type)) cancel?.remove();
    if (message.type === "started") { showCode(message.code); state.textContent = "running"; state.className = "badge running"; }
    else if (message.type === "progress") fill.style.width = `${Math.round(message.progress * 100)}%`;
    else if (message.type === "video") {
      fill.style.width = "100%";
      const video = el("video", { controls: "", src: message.data, loop: "" });
      title.append(video);
    } else if (message.type === "done") {
      state.textContent = "completed"; state.className = "badge completed";
      title.append(el("div", { class: "small muted" }, timings(message.metrics)), historyLink(message.request_id));
    } else if (message.type === "cancelled") {
      state.textContent = "cancelled"; state.className = "badge";
    } else if (message.type === "error") {
      state.textContent = "failed"; state.className = "badge failed";
      title.append(el("div", { class: "field-error" }, message.message));
      showFieldError(form, message);
    }
  });
  row.dataset.ref = ref;
  cancel = el("button", { type: "button", class: "small" }, "Cancel");
  cancel.addEventListener("click", () => { socket.cancel(ref); cancel.remove(); });
  if (!["completed", "failed", "cancelled"].includes(state.textContent)) state.after(cancel);
});
