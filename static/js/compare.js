// Several jobs side by side: one uPlot chart per metric (x = step), one line per job. The
// metrics to draw come from the page (every metric all the jobs have, or the one asked for).
(function () {
  "use strict";
  var box = document.getElementById("compare-chart");
  if (!box || !window.uPlot) return;
  var sources = JSON.parse(document.getElementById("compare-sources").textContent);
  var metrics = JSON.parse(document.getElementById("compare-metrics").textContent);
  var colours = ["#3b5bdb", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0c8599", "#f08c00", "#495057"];
  if (!metrics.length || !sources.length) return;
  var axis = getComputedStyle(document.body).color;  // readable in the dark theme too
  var grid = getComputedStyle(document.documentElement).getPropertyValue("--line").trim() || "#ddd";

  function draw(metric, payloads) {
    var steps = {};
    payloads.forEach(function (p) {
      var s = p.series[metric];
      if (s) s.steps.forEach(function (x) { steps[x] = true; });
    });
    var xs = Object.keys(steps).map(Number).sort(function (a, b) { return a - b; });
    var data = [xs];
    payloads.forEach(function (p) {
      var s = p.series[metric], at = {};
      if (s) s.steps.forEach(function (x, i) { at[x] = s.values[i]; });
      data.push(xs.map(function (x) { return x in at ? at[x] : null; }));
    });
    var series = [{ label: "step" }].concat(sources.map(function (s, i) {
      return { label: s.name, stroke: colours[i % colours.length], width: 1.5, spanGaps: true, points: { show: false } };
    }));
    var el = document.createElement("figure");
    el.className = "chart";
    el.dataset.metric = metric;
    box.appendChild(el);
    var wide = metrics.length === 1 ? box.clientWidth - 16 : Math.min(560, box.clientWidth / 2 - 32);
    new uPlot({ title: metric, width: Math.max(300, wide), height: metrics.length === 1 ? 360 : 240,
                scales: { x: { time: false } },
                axes: [{ label: "step", stroke: axis, grid: { stroke: grid } }, { size: 60, stroke: axis, grid: { stroke: grid } }],
                series: series }, data, el);
  }

  Promise.all(sources.map(function (s) {
    return fetch(s.url, { credentials: "same-origin" }).then(function (r) { return r.json(); });
  })).then(function (payloads) {
    metrics.forEach(function (m) { draw(m, payloads); });
  });
})();
