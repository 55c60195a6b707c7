(function () {
  "use strict";
  // Live views: every data-refresh seconds, fetch this URL again and swap
  // the #live element, keeping open <details> open. The page is complete
  // without this script (server-rendered; <noscript> reloads it instead).
  var root = document.querySelector("[data-refresh]");
  var every = root ? Number(root.getAttribute("data-refresh")) * 1000 : 0;
  function refresh() {
    return fetch(location.href, { headers: { Accept: "text/html" }, cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("live");
        var cur = document.getElementById("live");
        if (!fresh || !cur) { return; }
        var open = {};
        cur.querySelectorAll("details[id][open]").forEach(function (d) { open[d.id] = true; });
        fresh.querySelectorAll("details[id]").forEach(function (d) { if (open[d.id]) { d.setAttribute("open", ""); } });
        cur.replaceWith(document.adoptNode(fresh));
        document.documentElement.removeAttribute("data-stale");
      })
      .catch(function () { document.documentElement.setAttribute("data-stale", "1"); });
  }
  window.hopgateRefresh = refresh;
  if (every > 0) {
    setInterval(function () { if (!document.hidden) { refresh(); } }, every);
  }
})();
