// My/team/all codespaces: poll the status endpoint, refresh state badges and draw utilization sparklines.
(function () {
  "use strict";
  var table = document.getElementById("codespaces");
  if (!table) { return; }
  var url = table.getAttribute("data-status-url");
  var ids = Array.prototype.map.call(table.querySelectorAll("tr[data-codespace]"), function (row) {
    return row.getAttribute("data-codespace");
  });
  if (!ids.length) { return; }

  function sparkline(el, series) {
    if (!window.Plotly || !el) { return; }
    var values = series.values.map(function (v) { return v === null ? null : v; });
    var now = Date.now();
    Plotly.react(el, [{ x: series.ts, y: values, type: "scatter", mode: "lines+markers", marker: { size: 3 }, line: { width: 1.5, color: "#4f46e5" },
      fill: "tozeroy", fillcolor: "rgba(79,70,229,.12)", hovertemplate: "%{y:.0f}%<extra></extra>" }],
      { margin: { l: 0, r: 0, t: 0, b: 0 }, height: 36, width: 160,
        xaxis: { visible: false, type: "date", range: [new Date(now - 3600 * 1000).toISOString(), new Date(now).toISOString()] },
        yaxis: { visible: false, range: [0, 100] }, showlegend: false, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)" },
      { displayModeBar: false, staticPlot: false, responsive: false });
    el.setAttribute("data-points", String(values.length));
  }

  function refresh() {
    fetch(url + "?ids=" + ids.join(","), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) { return; }
        data.codespaces.forEach(function (cs) {
          var row = table.querySelector('tr[data-codespace="' + cs.id + '"]');
          if (!row) { return; }
          var badge = row.querySelector("[data-testid=state]");
          if (badge && badge.getAttribute("data-state") !== cs.state) {
            badge.textContent = cs.state_label;
            badge.className = "badge " + cs.badge;
            badge.setAttribute("data-state", cs.state);
          }
          var where = row.querySelector("[data-testid=location]");
          if (where) { where.textContent = (cs.location || "—") + (cs.gpu_model ? " " + cs.gpu_model : ""); }
          sparkline(row.querySelector("[data-sparkline]"), cs.utilization);
        });
      })
      .catch(function () { /* offline for a moment: the next poll retries */ });
  }
  refresh();
  window.setInterval(refresh, 5000);
})();
