// New codespace: switching template or quota reloads the picker (server-computed); the custom size can be
// checked against the scheduler before submitting.
(function () {
  "use strict";
  var form = document.getElementById("create-form");
  if (!form) { return; }

  // A new template gets the quota that suits it best (server default); a new quota keeps the template.
  ["id_template", "id_quota"].forEach(function (id) {
    var select = document.getElementById(id);
    if (!select) { return; }
    select.addEventListener("change", function () {
      var params = new URLSearchParams();
      params.set("template", document.getElementById("id_template").value);
      if (id === "id_quota") { params.set("quota", select.value); }
      window.location.search = params.toString();
    });
  });

  var custom = document.getElementById("custom-size");
  function syncCustom() {
    if (!custom) { return; }
    var chosen = form.querySelector("input[name=preset]:checked");
    custom.hidden = !(chosen && chosen.value === "custom");
  }
  form.querySelectorAll("input[name=preset]").forEach(function (radio) { radio.addEventListener("change", syncCustom); });
  syncCustom();

  var check = document.getElementById("check-size");
  var result = document.getElementById("custom-result");
  if (!check) { return; }
  function value(id) { var el = document.getElementById(id); return el ? el.value : ""; }
  check.addEventListener("click", function () {
    var token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    form.querySelectorAll("[data-js-error]").forEach(function (el) { el.textContent = ""; });
    var body = {
      template: value("id_template"), quota: value("id_quota"), gpu_mode: value("id_gpu_mode"),
      gpu_percent: value("id_gpu_percent"), gpu_memory_gib: value("id_gpu_memory_gib"), gpu_count: value("id_gpu_count"),
      gpu_model: value("id_gpu_model"), cpu_cores: value("id_cpu_cores"), memory_gib: value("id_memory_gib")
    };
    result.textContent = "Checking…";
    fetch(form.getAttribute("data-preview-url"), {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": token, Accept: "application/json" },
      body: JSON.stringify(body)
    }).then(function (r) { return r.json(); }).then(function (data) {
      if (!data.valid) {
        result.textContent = data.message;
        Object.keys(data.fields || {}).forEach(function (name) {
          var slot = form.querySelector('[data-js-error="' + name + '"]');
          if (slot) { slot.textContent = data.fields[name].join(" "); }
        });
        return;
      }
      result.textContent = data.starts_now
        ? "Starts now" + (data.node ? " on " + data.node : "") + "."
        : "Would queue: " + data.reason;
    }).catch(function () { result.textContent = "Could not check right now; you can still create it."; });
  });
})();
