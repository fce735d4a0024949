// Quota group form: the node-selector builder. Values offered follow the chosen key; the preview of
// matching nodes and GPUs (and overlaps with other groups) updates as rows change. Without this
// script the "Preview matching nodes" button posts the form and the server renders the same preview.
(function () {
  "use strict";
  var form = document.getElementById("group-form");
  if (!form) { return; }
  var url = form.getAttribute("data-preview-url");
  var group = form.getAttribute("data-group");
  var box = document.getElementById("selector-preview");
  var button = form.querySelector(".preview-button");
  var timer = null;
  var sequence = 0;
  if (button) { button.style.display = "none"; }  // the preview below follows every change

  function valuesListFor(key) {
    var lists = form.querySelectorAll("datalist[data-for-key]");
    for (var i = 0; i < lists.length; i++) {
      if (lists[i].getAttribute("data-for-key") === key) { return lists[i].id; }
    }
    return "label-values";
  }

  function narrowValues() {
    form.querySelectorAll("[data-selector-key]").forEach(function (keyInput) {
      var row = keyInput.getAttribute("data-selector-key");
      var valueInput = form.querySelector('[data-selector-value="' + row + '"]');
      if (valueInput) { valueInput.setAttribute("list", valuesListFor(keyInput.value.trim())); }
    });
  }

  function text(tag, content, cls) {
    var el = document.createElement(tag);
    el.textContent = content;
    if (cls) { el.className = cls; }
    return el;
  }

  function render(data) {
    box.textContent = "";
    var models = Object.keys(data.gpus_by_model).map(function (m) { return data.gpus_by_model[m] + " × " + m; });
    var summary = text("p", "");
    summary.setAttribute("data-testid", "preview-summary");
    summary.appendChild(text("strong", "Matches " + data.node_count + " node" + (data.node_count === 1 ? "" : "s") +
      " and " + data.gpu_count + " GPU" + (data.gpu_count === 1 ? "" : "s")));
    summary.appendChild(document.createTextNode((models.length ? " (" + models.join(", ") + ")" : "") + "."));
    box.appendChild(summary);
    if (data.nodes.length) {
      box.appendChild(text("p", data.nodes.join(", ") + (data.node_count > data.nodes.length ? " …" : ""), "muted wrap"));
    }
    data.conflicts.forEach(function (c) {
      var p = text("p", "Overlaps group " + c.group + (c.nodes.length ? " on " + c.nodes.join(", ") : "") +
        ": saving is refused until a label value tells them apart.", "field-error");
      p.setAttribute("data-testid", "preview-conflict");
      box.appendChild(p);
    });
  }

  function refresh() {
    var params = new URLSearchParams();
    form.querySelectorAll("[data-selector-key], [data-selector-value]").forEach(function (el) {
      if (el.value.trim()) { params.append(el.name, el.value.trim()); }
    });
    if (group) { params.append("group", group); }
    var mine = ++sequence;
    fetch(url + "?" + params.toString(), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (data) {
        if (mine !== sequence) { return; }
        if (data.error) {
          box.textContent = "";
          box.appendChild(text("p", data.error, "field-error"));
          return;
        }
        render(data);
      })
      .catch(function () { /* the next change retries */ });
  }

  form.addEventListener("input", function (event) {
    if (!event.target.matches("[data-selector-key], [data-selector-value]")) { return; }
    narrowValues();
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, 200);
  });
  narrowValues();
  refresh();
})();
