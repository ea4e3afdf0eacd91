// Voice playground "View code": the samples follow the form's deployment, voice and instructions.
import { wireCodeTabs } from "./ui.js";

const box = document.getElementById("voice-code");
const form = document.getElementById("voice-form");
let timer = null;

async function refresh() {
  const query = new URLSearchParams({
    deployment: form.querySelector("#deployment").value || "my-voice-deployment",
    voice: form.querySelector("#voice").value,
    instructions: form.querySelector("#instructions").value,
  });
  const response = await fetch(`${box.dataset.codeUrl}?${query}`, { credentials: "same-origin" });
  if (!response.ok) return;
  const code = await response.json();
  box.querySelector('[data-code="python"]').textContent = code.python;
  box.querySelector('[data-code="javascript"]').textContent = code.javascript;
  box.dataset.codeFor = query.toString();
}

if (box && form) {
  wireCodeTabs("voice-code");
  form.querySelector("#deployment").addEventListener("change", refresh);
  form.querySelector("#voice").addEventListener("change", refresh);
  form.querySelector("#instructions").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(refresh, 300); });
  refresh();  // the preselected deployment (?deployment=...) may differ from the first
}
