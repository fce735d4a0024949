// The what-if page: draw each figure the page embeds (json_script) with Plotly. No inline scripts.
(function () {
  "use strict";
  if (typeof Plotly === "undefined") { return; }
  document.querySelectorAll("[data-figure-source]").forEach(function (chart) {
    var source = document.getElementById(chart.getAttribute("data-figure-source"));
    if (!source) { return; }
    var figure = JSON.parse(source.textContent);
    Plotly.newPlot(chart, figure.data, figure.layout, { responsive: true, displaylogo: false });
  });
})();
