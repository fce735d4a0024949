// Dashboard pages: poll the page's JSON endpoint with the form's values, draw the figures with Plotly,
// fill the headline figures and tables. No inline scripts; every page uses this one file.
(function () {
  "use strict";
  var root = document.querySelector("[data-dashboard]");
  if (!root || typeof Plotly === "undefined") { return; }
  var url = root.getAttribute("data-url");
  var refreshMs = Math.max(5, parseInt(root.getAttribute("data-refresh"), 10) || 60) * 1000;
  var form = root.querySelector("form.dashboard-controls");
  var status = root.querySelector("[data-status]");
  var auto = root.querySelector("[data-autorefresh]");
  var csv = root.querySelector("[data-csv]");
  var timer = null;
  var inflight = false;

  function query() {
    var params = new URLSearchParams();
    new FormData(form).forEach(function (value, key) {
      if (key.charAt(0) !== "_" && value !== "") { params.append(key, value); }
    });
    return params.toString();
  }

  function show(value) {
    if (value === null || value === undefined || value === "") { return "—"; }
    if (typeof value === "number") { return value.toLocaleString(undefined, { maximumFractionDigits: 2 }); }
    return String(value);
  }

  function fillTable(table, spec) {
    var head = table.querySelector("thead");
    var body = table.querySelector("tbody");
    head.innerHTML = "";
    body.innerHTML = "";
    var tr = document.createElement("tr");
    spec.columns.forEach(function (c) { var th = document.createElement("th"); th.textContent = c; tr.appendChild(th); });
    head.appendChild(tr);
    if (!spec.rows.length) {
      var empty = document.createElement("tr");
      var td = document.createElement("td");
      td.colSpan = spec.columns.length; td.className = "muted"; td.textContent = "Nothing in this range.";
      empty.appendChild(td); body.appendChild(empty);
    }
    spec.rows.forEach(function (row) {
      var r = document.createElement("tr");
      row.forEach(function (cell) { var td = document.createElement("td"); td.textContent = show(cell); r.appendChild(td); });
      body.appendChild(r);
    });
  }

  function clearFieldErrors() {
    root.querySelectorAll("[data-field-error]").forEach(function (el) { el.textContent = ""; });
  }

  function render(body) {
    Object.keys(body.figures || {}).forEach(function (name) {
      var el = root.querySelector('[data-figure="' + name + '"]');
      if (el) {
        var fig = body.figures[name];
        Plotly.react(el, fig.data, fig.layout, { responsive: true, displaylogo: false });
      }
    });
    Object.keys(body.summary || {}).forEach(function (key) {
      root.querySelectorAll('[data-summary="' + key + '"]').forEach(function (el) { el.textContent = show(body.summary[key]); });
    });
    Object.keys(body.tables || {}).forEach(function (name) {
      var table = root.querySelector('[data-table="' + name + '"]');
      if (table) { fillTable(table, body.tables[name]); }
    });
  }

  function load() {
    if (inflight) { return; }
    inflight = true;
    var qs = query();
    if (csv) { csv.href = csv.href.split("?")[0] + (qs ? "?" + qs : ""); }
    fetch(url + (qs ? "?" + qs : ""), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (resp) { return resp.json().then(function (body) { return { ok: resp.ok, body: body }; }); })
      .then(function (res) {
        clearFieldErrors();
        if (!res.ok) {
          var err = res.body.error || { message: "Could not load the data." };
          status.textContent = err.message;
          status.classList.add("form-error");
          Object.keys(err.fields || {}).forEach(function (field) {
            var el = root.querySelector('[data-field-error="' + field + '"]');
            if (el) { el.textContent = err.fields[field].join(" "); }
          });
          return;
        }
        status.classList.remove("form-error");
        render(res.body);
        status.textContent = "Updated " + new Date().toLocaleTimeString() +
          (res.body.resolution ? " · " + res.body.resolution + " resolution" : "");
        root.setAttribute("data-loaded", "true");
      })
      .catch(function () {
        status.textContent = "Could not reach the server; retrying.";
        status.classList.add("form-error");
      })
      .finally(function () { inflight = false; });
  }

  function schedule() {
    if (timer) { clearInterval(timer); timer = null; }
    if (!auto || auto.checked) {
      timer = setInterval(function () { if (!document.hidden) { load(); } }, refreshMs);
    }
  }

  form.addEventListener("submit", function (ev) { ev.preventDefault(); load(); });
  form.addEventListener("change", function (ev) {
    if (ev.target === auto) { schedule(); return; }
    var qs = query();
    if (ev.target.hasAttribute("data-reload")) {
      window.location.search = qs;  // titles and selectors change with a tenant or pool
      return;
    }
    window.history.replaceState(null, "", window.location.pathname + (qs ? "?" + qs : ""));
    load();
  });
  load();
  schedule();
})();
