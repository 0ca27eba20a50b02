// The "Link to game" button of a webshop page, served by the deep-link
// sign-in service. A page places it with one tag:
//
//   <script src="https://<service>/stores/<store id>/auth/button.js" async></script>
//
// It renders where the tag is, or inside the page's element with the
// attribute data-deeplink-button when there is one. It shows "Link to
// game" while the store has sign-in on (auth/config), and once the player
// is signed in (the callback's session cookie: auth/me), their first name
// and "Sign out", which ends the session and loads the page again. It
// uses no inline script or style: a page's CSP needs only to allow the
// service's origin for scripts, styles and connections.
(() => {
  const tag = document.currentScript;
  if (!tag) return;
  const base = tag.src.replace(/\/button\.js([?#].*)?$/, ""); // …/stores/<id>/auth
  const css = document.createElement("link");
  css.rel = "stylesheet";
  css.href = base + "/button.css";
  document.head.appendChild(css);

  let box = document.querySelector("[data-deeplink-button]");
  if (!box) {
    box = document.createElement("span");
    tag.after(box);
  }
  box.classList.add("deeplink");

  const get = (path) => fetch(base + path, { credentials: "same-origin", cache: "no-store" });

  // show puts nodes in the box, and names what it shows in its
  // data-state ("off", "link" or "signed-in"): for the page's own CSS.
  const show = (state, ...nodes) => {
    box.replaceChildren(...nodes);
    box.dataset.state = state;
  };

  async function render() {
    let config;
    try {
      const r = await get("/config");
      if (!r.ok) throw new Error("auth/config answered " + r.status);
      config = (await r.json()).data;
    } catch (err) {
      console.warn("deeplink button:", err);
      show("off");
      return;
    }
    if (!config.link_to_game) {
      show("off"); // sign-in is off for this store
      return;
    }
    const me = await get("/me").catch(() => null);
    if (me && me.ok) {
      const player = (await me.json()).data.player || {};
      const name = document.createElement("span");
      name.className = "deeplink-player";
      name.textContent = player.first_name || "Signed in";
      const out = document.createElement("button");
      out.type = "button";
      out.className = "deeplink-button";
      out.textContent = "Sign out";
      out.addEventListener("click", async () => {
        out.disabled = true;
        await fetch(base + "/logout", { method: "POST", credentials: "same-origin" }).catch(() => null);
        location.reload(); // the page may show the player too, from the session just ended
      });
      show("signed-in", name, out);
      return;
    }
    const link = document.createElement("a");
    link.className = "deeplink-button";
    link.href = config.link_url + "?return_to=" + encodeURIComponent(location.pathname + location.search);
    link.textContent = "Link to game";
    show("link", link);
  }
  render();
})();
