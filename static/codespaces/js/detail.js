// Codespace detail: draw the utilization sparkline; reload while the codespace is in a transitional state.
(function () {
  "use strict";
  var box = document.getElementById("codespace");
  if (!box) { return; }
  var id = box.getAttribute("data-codespace");
  var state = box.getAttribute("data-state");
  var url = box.getAttribute("data-status-url") + "?ids=" + id;
  var transitional = ["queued", "placed", "starting", "stopping", "deleting"];

  function draw(series) {
    var el = document.querySelector("[data-sparkline]");
    if (!window.Plotly || !el) { return; }
    var now = Date.now();
    Plotly.react(el, [{ x: series.ts, y: series.values, type: "scatter", mode: "lines+markers", marker: { size: 4 }, line: { width: 2, color: "#4f46e5" },
      fill: "tozeroy", fillcolor: "rgba(79,70,229,.12)", hovertemplate: "%{x|%H:%M}: %{y:.0f}%<extra></extra>" }],
      { margin: { l: 36, r: 8, t: 4, b: 24 }, height: 120, yaxis: { range: [0, 100], ticksuffix: "%" },
        xaxis: { type: "date", range: [new Date(now - 3600 * 1000).toISOString(), new Date(now).toISOString()], tickformat: "%H:%M" },
        showlegend: false, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)" },
      { displayModeBar: false, responsive: true });
    el.setAttribute("data-points", String(series.values.length));
  }

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data || !data.codespaces.length) { return; }
        var cs = data.codespaces[0];
        draw(cs.utilization);
        if (cs.state !== state) { window.location.reload(); }
      })
      .catch(function () { /* the next poll retries */ });
  }
  poll();
  window.setInterval(poll, transitional.indexOf(state) >= 0 ? 2000 : 10000);
})();
