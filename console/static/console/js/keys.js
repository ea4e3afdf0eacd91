// API keys page: copy the one-time secret, and confirm before a revoke.
const status = document.querySelector("[data-copy-status]");

async function copyText(text) {
  // navigator.clipboard exists in secure contexts only (https, localhost); a console reached over
  // plain http on another host copies through a selected textarea instead.
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.append(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  if (!copied) throw new Error("the browser refused to copy");
}

document.querySelectorAll("[data-copy]").forEach((button) => {
  button.addEventListener("click", async () => {
    const text = document.getElementById(button.dataset.copy).textContent.trim();
    try {
      await copyText(text);
      button.textContent = "Copied";
      if (status) status.textContent = "Copied to the clipboard.";
    } catch (error) {
      if (status) status.textContent = `Could not copy (${error.message}): select the key and copy it by hand.`;
    }
  });
});

document.querySelectorAll("form[data-confirm]").forEach((form) => {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
});
