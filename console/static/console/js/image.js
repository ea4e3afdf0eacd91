// Image playground: a progress bar that follows the denoising steps, and a gallery.
import { PlaygroundSocket } from "./socket.js";
import { clearErrors, el, formValues, historyLink, preselectDeployment, showCode, showFieldError, timings, wireCodeTabs } from "./ui.js";

const socket = new PlaygroundSocket();
const form = document.getElementById("image-form");
const bar = document.querySelector("#image-progress > span");
const status = document.getElementById("image-status");
const gallery = document.getElementById("gallery");

wireCodeTabs();
preselectDeployment();

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearErrors(form);
  const values = formValues(form);
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  bar.style.width = "0%";
  status.textContent = "queued…";
  window.omniProgress = [];
  await socket.run("image", values.deployment, values, (message) => {
    if (message.type === "started") showCode(message.code);
    else if (message.type === "progress") {
      window.omniProgress.push(message.progress);
      bar.style.width = `${Math.round(message.progress * 100)}%`;
      status.textContent = `step ${message.step} of ${message.total}`;
    } else if (message.type === "image") {
      bar.style.width = "100%";
      gallery.querySelector(".empty")?.remove();
      const figure = el("figure", { "data-image": "" });
      const img = el("img", { src: message.data, alt: values.prompt });
      const caption = el("figcaption", {}, values.prompt);
      caption.append(el("br"), el("span", {}, `${message.params.width}×${message.params.height} · ${message.params.num_inference_steps} steps · seed ${message.params.seed} `));
      const link = el("a", { href: message.data, download: `image-${message.params.seed}.png` }, "download");
      caption.append(link);
      figure.append(img, caption);
      gallery.prepend(figure);
      figure.dataset.caption = values.prompt;
      figure._caption = caption;
    } else if (message.type === "done") {
      button.disabled = false;
      status.textContent = `done · ${timings(message.metrics)} · `;
      status.append(historyLink(message.request_id));
    } else if (message.type === "error") {
      button.disabled = false;
      status.textContent = "";
      showFieldError(form, message);
    }
  });
});
