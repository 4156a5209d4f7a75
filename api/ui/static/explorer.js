// Live tables: an element with data-live="URL" has its rows replaced by the server's fragment
// every 2 s, until the server answers x-live: 0 (nothing left running). No page reload.
"use strict";
(function () {
  for (const el of document.querySelectorAll("[data-live]")) {
    const url = el.dataset.live;
    const tick = async () => {
      try {
        const r = await fetch(url, { credentials: "same-origin", cache: "no-store" });
        if (r.status === 401) { window.location.href = "/ui/login"; return; }
        if (!r.ok) { setTimeout(tick, 5000); return; }
        const html = await r.text();
        if (html !== el.dataset.last) { el.innerHTML = html; el.dataset.last = html; }
        if (r.headers.get("x-live") !== "0") setTimeout(tick, 2000);
      } catch (e) { setTimeout(tick, 5000); }
    };
    setTimeout(tick, 2000);
  }
})();
