// Shell behaviour shared by every page (no inline scripts).
(function () {
  document.querySelectorAll("select[data-autosubmit]").forEach(function (el) {
    el.addEventListener("change", function () { el.form.submit(); });
  });
  document.querySelectorAll("[data-confirm]").forEach(function (el) {
    el.addEventListener("click", function (ev) {
      if (!window.confirm(el.getAttribute("data-confirm"))) { ev.preventDefault(); }
    });
  });

  // Success messages survive a reload: pages that refresh themselves (a codespace reloads when its state
  // changes) would otherwise eat the message the action just showed. The messages shown are kept for a
  // minute for this path and shown again when the same page is reloaded; any other navigation drops them.
  var KEY = "tessera-messages";
  var KEEP_MS = 60000;
  var list = document.querySelector("ul.messages");
  var navigation = window.performance && performance.getEntriesByType ? performance.getEntriesByType("navigation")[0] : null;
  var reloaded = navigation && navigation.type === "reload";
  try {
    if (list) {
      var shown = Array.prototype.map.call(list.querySelectorAll(".message"), function (li) {
        return { tags: li.className, text: li.textContent };
      });
      sessionStorage.setItem(KEY, JSON.stringify({ path: location.pathname, until: Date.now() + KEEP_MS, messages: shown }));
    } else if (reloaded) {
      var saved = JSON.parse(sessionStorage.getItem(KEY) || "null");
      if (saved && saved.path === location.pathname && saved.until > Date.now()) {
        var ul = document.createElement("ul");
        ul.className = "messages";
        ul.setAttribute("data-restored", "true");
        saved.messages.forEach(function (m) {
          var li = document.createElement("li");
          li.className = m.tags;
          li.setAttribute("role", "status");
          li.textContent = m.text;
          ul.appendChild(li);
        });
        var main = document.querySelector("main");
        if (main) { main.insertBefore(ul, main.firstChild); }
      }
    } else {
      sessionStorage.removeItem(KEY);
    }
  } catch (e) { /* storage unavailable (private mode): messages show once, as before */ }
})();
