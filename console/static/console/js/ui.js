// Small helpers shared by the playgrounds. Everything user-provided goes in as text, never HTML.
export function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text) node.textContent = text;
  return node;
}

export function showFieldError(form, event) {
  clearErrors(form);
  const slot = event.field && form.querySelector(`[data-error-for="${CSS.escape(event.field)}"]`);
  const target = slot || form.querySelector("[data-error-for='form']");
  if (target) target.textContent = event.message;
  const field = event.field && form.querySelector(`[name="${CSS.escape(event.field)}"]`);
  if (field) field.closest(".field")?.classList.add("invalid");
}

export function clearErrors(form) {
  form.querySelectorAll("[data-error-for]").forEach((slot) => { slot.textContent = ""; });
  form.querySelectorAll(".field.invalid").forEach((field) => field.classList.remove("invalid"));
}

export function showCode(code) {
  const box = document.getElementById("view-code");
  if (!box || !code) return;
  box.hidden = false;
  box.querySelector('[data-code="curl"]').textContent = code.curl;
  box.querySelector('[data-code="python"]').textContent = code.python;
}

export function wireCodeTabs(boxId = "view-code") {
  const box = document.getElementById(boxId);
  if (!box) return;
  box.querySelectorAll("[data-code-tab]").forEach((button) => {
    button.addEventListener("click", () => {
      box.querySelectorAll("[data-code-tab]").forEach((b) => b.classList.toggle("primary", b === button));
      box.querySelectorAll("[data-code]").forEach((pre) => { pre.hidden = pre.dataset.code !== button.dataset.codeTab; });
    });
  });
}

export function formValues(form) {
  const values = {};
  for (const [key, value] of new FormData(form).entries()) if (typeof value === "string") values[key] = value;
  return values;
}

export function preselectDeployment() {
  const wanted = new URLSearchParams(location.search).get("deployment");
  const select = document.getElementById("deployment");
  if (wanted && select && [...select.options].some((o) => o.value === wanted)) select.value = wanted;
}

export function timings(metrics) {
  const parts = [];
  for (const [key, label] of [["ttft_s", "TTFT"], ["ttfp_s", "TTFP"], ["e2el_s", "E2EL"]]) {
    if (metrics && metrics[key] != null) parts.push(`${label} ${(metrics[key] * 1000).toFixed(0)} ms`);
  }
  return parts.join(" · ");
}

export function historyLink(requestId) {
  return el("a", { href: `/history/${encodeURIComponent(requestId)}/`, "data-history-link": requestId }, "history");
}

export function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}
