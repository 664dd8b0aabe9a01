// Several jobs' curves of one metric on one uPlot chart (x = step, one series per job).
(function () {
  "use strict";
  var box = document.getElementById("compare-chart");
  if (!box || !window.uPlot) return;
  var sources = JSON.parse(document.getElementById("compare-sources").textContent);
  var metric = JSON.parse(document.getElementById("compare-metric").textContent);
  var colours = ["#3b5bdb", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0c8599", "#f08c00", "#495057"];
  if (!metric || !sources.length) return;
  Promise.all(sources.map(function (s) {
    return fetch(s.url, { credentials: "same-origin" }).then(function (r) { return r.json(); });
  })).then(function (payloads) {
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
    new uPlot({ title: metric, width: Math.max(320, box.clientWidth - 16), height: 360,
                scales: { x: { time: false } }, axes: [{ label: "step" }, { size: 60 }], series: series }, data, box);
  });
})();
