// The dashboard's only script: copy buttons, filters that apply when
// changed, and a delivery list that refreshes itself while a delivery is
// pending. Every page works without it.
"use strict";

document.addEventListener("click", (ev) => {
  const btn = ev.target.closest("[data-copy]");
  if (!btn) return;
  const field = document.getElementById(btn.dataset.copy);
  field.select();
  const done = () => { btn.textContent = "Copied"; setTimeout(() => { btn.textContent = "Copy"; }, 2000); };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(field.value).then(done, () => document.execCommand("copy") && done());
  } else if (document.execCommand("copy")) {
    done();
  }
});

for (const form of document.querySelectorAll("form[data-autosubmit]")) {
  for (const sel of form.querySelectorAll("select")) {
    sel.addEventListener("change", () => form.submit());
  }
}

// Recover takes a local date and time; the service wants RFC 3339.
for (const input of document.querySelectorAll('input[type="datetime-local"][name="since"]')) {
  input.form.addEventListener("submit", () => {
    if (!input.value) return;
    const hidden = document.createElement("input");
    hidden.type = "hidden";
    hidden.name = "since_rfc3339";
    hidden.value = new Date(input.value).toISOString();
    input.form.appendChild(hidden);
  });
}

const rows = document.querySelector("tbody[data-refresh]");
if (rows) {
  const refresh = async () => {
    const url = new URL(location.href);
    url.searchParams.set("partial", "rows");
    url.searchParams.delete("done");
    try {
      const resp = await fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } });
      if (resp.ok) {
        rows.innerHTML = await resp.text();
        if (!rows.querySelector('tr[data-status="pending"]')) return; // settled: stop
      }
    } catch (e) { /* offline for a moment: try again */ }
    setTimeout(refresh, 2000);
  };
  setTimeout(refresh, 2000);
}
