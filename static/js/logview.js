// Follows a job's log over Server-Sent Events (GET /jobs/ID/logs/stream).
// Rows arrive pre-rendered and escaped by the server; this script only places them.
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
  var source = null, following = true, pending = [], scheduled = false;

  function say(text) { if (state) state.textContent = text; }
  function atBottom() { return log.scrollHeight - log.scrollTop - log.clientHeight < 40; }

  function olderButton(before) {
    var url = new URL(log.dataset.olderUrl || streamUrl.href.replace("/logs/stream", "/logs/page"), location.href);
    url.searchParams.delete("after");
    url.searchParams.set("before", before);
    var old = log.querySelector(":scope > a.older");
    if (old) old.remove();
    var a = document.createElement("a");
    a.className = "button older";
    a.textContent = "Load older lines";
    a.href = url.pathname + url.search;
    a.setAttribute("hx-get", a.href);
    a.setAttribute("hx-swap", "outerHTML");
    log.insertBefore(a, log.firstChild);
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

  function onLine(event) {
    var line = JSON.parse(event.data);
    if (line.seq <= lastSeq) return; // a resend after a reconnect
    lastSeq = line.seq;
    pending.push(line.html);
    if (pending.length > MAX_ROWS) pending.splice(0, pending.length - MAX_ROWS);
    if (!scheduled) { scheduled = true; setTimeout(flush, 16); }
  }

  function open() {
    streamUrl.searchParams.set("after", lastSeq);
    source = new EventSource(streamUrl.href);
    source.onopen = function () { say("live"); };
    source.onmessage = onLine;
    source.addEventListener("end", function (event) {
      flush();
      close();
      var info = JSON.parse(event.data);
      say("job " + info.status + " · end of log");
      if (button) button.hidden = true;
    });
    source.onerror = function () {
      // EventSource reconnects by itself and sends Last-Event-ID; the server resumes there.
      if (source && source.readyState !== EventSource.CLOSED) say("reconnecting…");
    };
  }

  function close() { if (source) { source.close(); source = null; } }

  if (log.dataset.follow !== "1" || !window.EventSource) return;
  log.scrollTop = log.scrollHeight;
  if (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      following = !following;
      button.setAttribute("aria-pressed", following ? "true" : "false");
      button.textContent = following ? "Following · pause" : "Paused · follow";
      if (following) { open(); log.scrollTop = log.scrollHeight; } else { flush(); close(); say("paused"); }
    });
  }
  open();
})();
