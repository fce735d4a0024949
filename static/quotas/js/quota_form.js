// Quota edit / create page: live what-if preview and inline validation through the page's JSON endpoint.
(function () {
  var form = document.getElementById("quota-form");
  if (!form) { return; }
  var url = form.getAttribute("data-what-if-url");
  var table = document.getElementById("what-if");
  var status = document.getElementById("what-if-status");
  var timer = null;
  var sequence = 0;

  function clearErrors() {
    form.querySelectorAll(".field-error.live").forEach(function (el) { el.textContent = ""; });
    form.querySelectorAll("input[aria-invalid]").forEach(function (el) { el.removeAttribute("aria-invalid"); });
  }

  function showErrors(fields, message) {
    var placed = false;
    Object.keys(fields || {}).forEach(function (name) {
      var slot = form.querySelector('.field-error.live[data-live-for="' + name + '"]');
      var messages = fields[name];
      var text = Array.isArray(messages) ? messages.join(" ") : String(messages);
      if (slot) {
        slot.textContent = text;
        var input = form.querySelector('[name="' + name + '"]');
        if (input) { input.setAttribute("aria-invalid", "true"); }
        placed = true;
      }
    });
    status.textContent = placed ? "Fix the highlighted fields to see the preview." : (message || "Invalid input.");
  }

  function cell(text, strong) {
    var td = document.createElement("td");
    if (strong) {
      var parts = text.split(" → ");
      td.appendChild(document.createTextNode(parts[0] + " → "));
      var b = document.createElement("strong");
      b.textContent = parts[1];
      td.appendChild(b);
    } else {
      td.textContent = text;
    }
    return td;
  }

  function showRows(rows) {
    var body = table.querySelector("tbody");
    body.innerHTML = "";
    rows.forEach(function (row) {
      var tr = document.createElement("tr");
      if (row.is_target) { tr.classList.add("target"); }
      if (row.changed) { tr.classList.add("changed"); }
      tr.setAttribute("data-quota", row.name);
      tr.appendChild(cell(row.name));
      tr.appendChild(cell(row.gpu_demand));
      tr.appendChild(cell(row.gpu_before + " → " + row.gpu_after, true));
      tr.appendChild(cell(row.cpu_demand));
      tr.appendChild(cell(row.cpu_before + " → " + row.cpu_after, true));
      body.appendChild(tr);
    });
    var changed = rows.filter(function (r) { return r.changed; }).length;
    status.textContent = changed ? changed + " quota(s) would get a different runtime share." : "No runtime share changes for the current demand.";
  }

  function preview() {
    var mine = ++sequence;
    var data = new FormData(form);
    status.textContent = "Computing…";
    fetch(url, { method: "POST", body: data, credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) { return response.json().then(function (body) { return { ok: response.ok, body: body }; }); })
      .then(function (result) {
        if (mine !== sequence) { return; }
        clearErrors();
        if (result.ok) { showRows(result.body.rows); }
        else { showErrors(result.body.error.fields, result.body.error.message); }
      })
      .catch(function () { if (mine === sequence) { status.textContent = "Preview unavailable; Save still validates."; } });
  }

  form.addEventListener("input", function (event) {
    if (event.target.name === "note") { return; }
    clearTimeout(timer);
    timer = setTimeout(preview, 300);
  });
  form.addEventListener("change", function (event) {
    if (event.target.type === "checkbox" || event.target.tagName === "SELECT") { clearTimeout(timer); preview(); }
  });
  var button = form.querySelector('button[name="preview"]');
  if (button) {
    button.addEventListener("click", function (event) { event.preventDefault(); clearTimeout(timer); preview(); });
  }
})();
