// The job page's one live channel: GET /jobs/ID/logs/stream?channel=page (Server-Sent Events).
// Log lines arrive as "lines" events, [seq, rank, stream, text] each (plus the server's escaped HTML of
// a line with colour codes or other control characters); row() builds the row the server's own
// ansi.row() writes for the page and its older pages, text escaped, never parsed as HTML.
// The same stream carries the page's sections as named events: status, history, files and sites
// (the partials' HTML, swapped in place) and progress and metrics (handed to charts.js as
// "job:progress" / "job:metrics" DOM events). Every (re)connect starts with a snapshot of
// the sections, so a page that lost its connection shows the truth again once it is back.
// Nothing polls: when the job is final the server sends "end" and the page stops listening.
// The page keeps at most MAX_ROWS rows: older ones are dropped and come back through
// "Load older lines", so a job printing millions of lines never fills the browser.
(function () {
  "use strict";
  var MAX_ROWS = 5000;
  var log = document.getElementById("log");
  if (!log) return;
  var state = document.getElementById("log-state");
  var button = document.getElementById("log-follow");
  var streamUrl = new URL(log.dataset.streamUrl, location.href);
  var lastSeq = parseInt(streamUrl.searchParams.get("after") || "-1", 10);
  var source = null, following = log.dataset.follow === "1", pending = [], scheduled = false;
  var SECTIONS = { status: "job-status", history: "job-history", files: "job-files", sites: "job-sites" };

  var jobHref = streamUrl.pathname.replace(/\/logs\/stream$/, "");
  var ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;" };
  function escape(text) { return text.replace(/[&<>]/g, function (c) { return ESCAPES[c]; }); }

  // One row, as trainhub/jobs/ansi.py row() writes it (tests/e2e/test_job_page_live_browser.py
  // compares a live page's rows with the same lines rendered by the server).
  function row(line) {
    var seq = line[0], rank = line[1], stream = escape(line[2]), text = line[3];
    if (line[2] === "s" && text.lastIndexOf("finished: ", 0) === 0) {
      stream += text === "finished: exited with code 0" ? " ok" : " bad"; // the closing line, by outcome
    }
    return '<div class="line ' + stream + '" id="L' + seq + '" data-seq="' + seq + '" data-rank="' + rank + '">' +
      '<a class="n" href="' + jobHref + "?line=" + seq + "#L" + seq + '">' + seq + '</a><span class="r">' + rank +
      '</span><span class="t">' + (line.length > 4 ? line[4] : escape(text)) + "</span></div>";
  }

  function say(text) { if (state) state.textContent = text; }
  function atBottom() { return log.scrollHeight - log.scrollTop - log.clientHeight < 40; }

  function olderButton(before, href) {
    var url = new URL(href || log.dataset.olderUrl || streamUrl.href.replace("/logs/stream", "/logs/page"), location.href);
    url.searchParams.delete("after");
    url.searchParams.set("before", before);
    var old = log.querySelector(":scope > a.older");
    if (old) old.remove();
    var note = log.querySelector(":scope > .skipped"); // the button goes below a skipped-lines notice
    var a = document.createElement("a");
    a.className = "button older";
    a.textContent = "Load older lines";
    a.href = url.pathname + url.search;
    a.setAttribute("hx-get", a.href);
    a.setAttribute("hx-swap", "outerHTML");
    log.insertBefore(a, note ? note.nextSibling : log.firstChild);
    if (window.htmx) window.htmx.process(a);
  }

  function trim() {
    var rows = log.querySelectorAll(":scope > .line");
    var extra = rows.length - MAX_ROWS;
    if (extra <= 0) return;
    for (var i = 0; i < extra; i++) rows[i].remove();
    olderButton(rows[extra].dataset.seq);
  }

  function flush() {
    scheduled = false;
    if (!pending.length) return;
    var stick = following && atBottom();
    log.insertAdjacentHTML("beforeend", pending.join(""));
    pending = [];
    trim();
    if (stick) log.scrollTop = log.scrollHeight;
  }

  function onLines(event) {
    var lines = JSON.parse(event.data);
    for (var i = 0; i < lines.length; i++) {
      if (lines[i][0] <= lastSeq) continue; // a resend after a reconnect
      lastSeq = lines[i][0];
      pending.push(row(lines[i]));
    }
    if (pending.length > MAX_ROWS) pending.splice(0, pending.length - MAX_ROWS);
    if (!scheduled) { scheduled = true; setTimeout(flush, 16); }
  }

  function swap(name, event) {
    var data = JSON.parse(event.data), old = document.getElementById(SECTIONS[name]);
    if (old && data.html) {
      var box = document.createElement("div");
      box.innerHTML = data.html.trim();
      var fresh = box.firstElementChild;
      old.replaceWith(fresh);
      if (window.htmx) window.htmx.process(fresh);
    }
    relay(name, data);
  }

  function relay(name, data) {
    document.dispatchEvent(new CustomEvent("job:" + name, { detail: data }));
  }

  function open() {
    streamUrl.searchParams.set("channel", "page");
    streamUrl.searchParams.set("after", lastSeq);
    if (following) streamUrl.searchParams.delete("lines");
    else streamUrl.searchParams.set("lines", "0"); // paused, or old lines on screen: sections only
    var mine = source = new EventSource(streamUrl.href);
    source.onopen = function () { if (following) say("live"); };
    source.addEventListener("lines", onLines);
    Object.keys(SECTIONS).forEach(function (name) {
      source.addEventListener(name, function (event) { swap(name, event); });
    });
    ["progress", "metrics"].forEach(function (name) {
      source.addEventListener(name, function (event) { relay(name, JSON.parse(event.data)); });
    });
    source.addEventListener("skipped", function (event) {
      // A client far behind (a finished job, or a running one after a long pause or disconnect) is
      // sent only the newest lines: what lies between the rows on screen and those is announced
      // here and left to "Load older lines" (a page at a time), not replayed.
      var info = JSON.parse(event.data);
      flush();
      log.querySelectorAll(":scope > .line, :scope > a.older, :scope > .skipped").forEach(function (row) { row.remove(); });
      lastSeq = info.last;
      var note = document.createElement("p");
      note.className = "skipped";
      note.setAttribute("role", "status");
      note.textContent = "Lines " + info.first.toLocaleString() + "–" + info.last.toLocaleString() + " (" +
        (info.last - info.first + 1).toLocaleString() + ") are not replayed here; the newest lines follow. ";
      var whole = document.createElement("a");
      whole.href = streamUrl.pathname.replace("/logs/stream", "/logs/download");
      whole.textContent = "download the whole log";
      note.appendChild(document.createTextNode("Load older lines below reads them a page at a time, or "));
      note.appendChild(whole);
      note.appendChild(document.createTextNode("."));
      log.insertBefore(note, log.firstChild);
      olderButton(info.last + 1, info.older_url);
    });
    source.addEventListener("end", function (event) {
      flush();
      close();
      var info = JSON.parse(event.data);
      say("job " + info.status + " · end of log");
      if (button) button.hidden = true;
      relay("end", info);
    });
    source.onerror = function () {
      // EventSource reconnects by itself and sends Last-Event-ID; the server resumes there and
      // sends the sections afresh. Only a refused reconnect closes it for good: try again later.
      if (source !== mine) return;
      if (source.readyState === EventSource.CLOSED) { source = null; setTimeout(function () { if (!source) open(); }, 3000); }
      say("reconnecting…");
    };
  }

  function close() { if (source) { source.close(); source = null; } }

  // The tail of the log opens at its end, where the outcome is (a finished job's "finished: …" line).
  if (log.dataset.tail === "1") log.scrollTop = log.scrollHeight;
  if (log.dataset.live !== "1" || !window.EventSource) return;
  log.scrollTop = log.scrollHeight;
  if (button && following) {
    button.hidden = false;
    button.addEventListener("click", function () {
      following = !following;
      button.setAttribute("aria-pressed", following ? "true" : "false");
      button.textContent = following ? "Following · pause" : "Paused · follow";
      flush();
      close();
      open(); // with lines again, or the sections only while paused
      if (following) log.scrollTop = log.scrollHeight; else say("paused");
    });
  }
  // After every deferred script (charts.js) has run, so no section event finds nobody listening.
  document.addEventListener("DOMContentLoaded", open);
})();
