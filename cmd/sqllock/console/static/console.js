// sqllock serve: live pages. After each read of the database the server
// sends an event; the page then fetches itself again (from the server's
// memory) and swaps in its new content, unless a form is being filled in.
"use strict";
(function () {
  let busy = false;
  function editing() {
    const a = document.activeElement;
    return a && a.form && a.form.classList.contains("action");
  }
  async function update() {
    const main = document.getElementById("content");
    if (busy || editing() || !main || !("live" in main.dataset)) return;
    busy = true;
    try {
      const resp = await fetch(location.href, { headers: { "Accept": "text/html" }, cache: "no-store" });
      const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
      const next = doc.getElementById("live");
      const cur = document.getElementById("live");
      if (next && cur && !editing()) {
        cur.replaceWith(next);
        document.title = doc.title;
        document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
      }
    } catch (e) {
      // the console itself is down: the next event, or poll, tries again
    } finally {
      busy = false;
    }
  }
  if (window.EventSource) {
    const es = new EventSource("/events");
    let first = true;
    es.addEventListener("read", function () {
      if (first) { first = false; return; } // the read the page shows
      update();
    });
  } else {
    setInterval(update, 2000);
  }
})();
