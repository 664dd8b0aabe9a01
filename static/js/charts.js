// Live metric charts (uPlot, served locally) and the progress bars with ETA; one chart per series.
// While the job is active, points and progress come from the page's live stream (logview.js
// relays its "metrics" and "progress" events); a finished job's page reads metrics.json once.
(function () {
  "use strict";
  var card = document.getElementById("charts-card");
  if (!card || !window.uPlot) return;
  var box = document.getElementById("charts");
  var eta = document.getElementById("job-eta");
  var url = card.dataset.metricsUrl;
  var data = {}, charts = {};
  var summary = document.getElementById("metric-summary");
  // axis labels in the page's own text colour: readable in the dark theme as in the light one
  var ink = getComputedStyle(document.body).color;
  var grid = getComputedStyle(document.documentElement).getPropertyValue("--line").trim() || "#ddd";
  var LOWER = /loss|err|perplex|ppl|mse|mae|rmse|wer|cer/i, HIGHER = /acc|f1|auc|precision|recall|bleu|rouge|score|iou|map/i;

  function fmt(v) { return v == null ? "–" : String(+v.toPrecision(4)); }

  function summarize() {
    if (!summary) return;
    var rows = Object.keys(data).sort().map(function (name) {
      var d = data[name], n = d.values.length;
      if (!n) return "";
      var last = d.values[n - 1], best = null, at = null, lower = LOWER.test(name), higher = HIGHER.test(name);
      if (lower || higher) {
        for (var i = 0; i < n; i++) {
          if (best === null || (lower ? d.values[i] < best : d.values[i] > best)) { best = d.values[i]; at = d.steps[i]; }
        }
      }
      var dt = document.createElement("dt"); dt.textContent = name;
      var dd = document.createElement("dd"); dd.textContent = fmt(last);
      if (best !== null) {
        var small = document.createElement("small");
        small.textContent = " best " + fmt(best) + " @ step " + at;
        dd.appendChild(small);
      }
      var div = document.createElement("div"); div.dataset.metric = name;
      div.appendChild(dt); div.appendChild(dd);
      return div;
    }).filter(Boolean);
    summary.replaceChildren.apply(summary, rows);
  }

  function duration(s) {
    s = Math.round(s);
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + sec + "s";
  }

  function progress(p) {
    var note = document.getElementById("metrics-note");
    if (note && p.metrics_note) { note.textContent = p.metrics_note; note.hidden = false; }
    if (!p.total_steps) return;
    document.querySelectorAll("progress.job-progress").forEach(function (b) { b.value = Math.min(1, p.step / p.total_steps); });
    document.querySelectorAll(".job-steps").forEach(function (s) { s.textContent = "step " + p.step + "/" + p.total_steps; });
    var text = "step " + p.step + "/" + p.total_steps;
    if (p.elapsed_seconds) text += " · elapsed " + duration(p.elapsed_seconds);
    if (p.active && p.eta_seconds != null) text += " · ETA " + duration(p.eta_seconds);
    eta.textContent = text;
  }

  function chart(name) {
    var el = document.createElement("figure");
    el.className = "chart";
    el.dataset.series = name;
    box.appendChild(el);
    var width = Math.max(280, Math.min(560, box.clientWidth / 2 - 16));
    return new uPlot({
      title: name, width: width, height: 220,
      scales: { x: { time: false } },
      axes: [{ label: "step", stroke: ink, grid: { stroke: grid } }, { size: 60, stroke: ink, grid: { stroke: grid }, values: function (u, vals) { return vals.map(function (v) { return v == null ? "" : +v.toPrecision(3); }); } }],
      series: [{ label: "step" }, { label: name, stroke: "#3b5bdb", width: 1.5, points: { show: false } }],
    }, [data[name].steps, data[name].values], el);
  }

  function merge(series) {
    Object.keys(series).sort().forEach(function (name) {
      var s = series[name], d = data[name] || (data[name] = { steps: [], values: [] });
      for (var i = 0; i < s.steps.length; i++) {
        if (d.steps.length && s.steps[i] <= d.steps[d.steps.length - 1]) continue;
        d.steps.push(s.steps[i]);
        d.values.push(s.values[i]);
      }
      if (!d.steps.length) return;
      var empty = box.querySelector("p.muted");
      if (empty) empty.remove();
      if (!charts[name]) charts[name] = chart(name);
      else charts[name].setData([d.steps, d.values]);
    });
    summarize();
  }

  document.addEventListener("job:metrics", function (e) { merge(e.detail.series); });
  document.addEventListener("job:progress", function (e) { progress(e.detail); });
  if (card.dataset.active === "1") return;
  fetch(url, { credentials: "same-origin" })
    .then(function (r) { return r.json(); })
    .then(function (p) { merge(p.series); progress(p); });
})();
