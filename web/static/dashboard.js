// The dashboard's only script: copy buttons, filters that apply when
// changed, a hint over a table that scrolls sideways, and a delivery list
// that refreshes itself while a delivery is pending. Every page works
// without it.
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

// Recover takes a local date and time; the service wants RFC 3339. One
// hidden field, set at each submit (a page restored from the cache keeps
// no stale value).
for (const input of document.querySelectorAll('input[type="datetime-local"][name="since"]')) {
  const hidden = document.createElement("input");
  hidden.type = "hidden";
  hidden.name = "since_rfc3339";
  input.form.appendChild(hidden);
  input.form.addEventListener("submit", () => {
    hidden.value = input.value ? new Date(input.value).toISOString() : "";
  });
}

// A table wider than its card: say so above it, while it is.
const hints = [...document.querySelectorAll("[data-scroll-hint]")];
const showHints = () => {
  for (const box of hints) {
    document.getElementById(box.dataset.scrollHint).hidden = box.scrollWidth <= box.clientWidth;
  }
};
showHints();
addEventListener("resize", showHints);

const rows = document.querySelector("tbody[data-refresh]");
if (rows) {
  const refresh = async () => {
    const url = new URL(location.href);
    url.searchParams.set("partial", "rows");
    url.searchParams.delete("done");
    try {
      const resp = await fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } });
      if (resp.redirected) { // the session ended: show the sign-in page itself
        location.reload();
        return;
      }
      if (resp.ok) {
        rows.innerHTML = await resp.text();
        showHints();
        if (!rows.querySelector('tr[data-status="pending"]')) return; // settled: stop
      }
    } catch (e) { /* offline for a moment: try again */ }
    setTimeout(refresh, 2000);
  };
  setTimeout(refresh, 2000);
}
