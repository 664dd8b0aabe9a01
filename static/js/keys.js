// Keyboard shortcuts, declared in the templates: an element with data-key="x" is activated
// by pressing x (an input or select is focused, anything else clicked). "?" lists them.
// Keys typed into a field, or with Ctrl/Alt/Meta, are left alone.
(function () {
  "use strict";
  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }
  function targets() {
    return Array.prototype.filter.call(document.querySelectorAll("[data-key]"), function (el) {
      return !el.hidden && el.offsetParent !== null;  // only what is on screen
    });
  }
  function help() {
    var box = document.getElementById("key-help");
    if (box) { box.remove(); return; }
    box = document.createElement("div");
    box.id = "key-help";
    box.className = "card key-help";
    box.setAttribute("role", "dialog");
    box.setAttribute("aria-label", "Keyboard shortcuts");
    var list = document.createElement("dl");
    targets().concat([{dataset: {key: "?"}, getAttribute: function () { return "show or hide this list"; }}])
      .forEach(function (el) {
        var dt = document.createElement("dt"), dd = document.createElement("dd"), kbd = document.createElement("kbd");
        kbd.textContent = el.dataset.key;
        dt.appendChild(kbd);
        dd.textContent = el.getAttribute("data-key-label") || el.getAttribute("aria-label") ||
          (el.textContent || "").trim() || el.getAttribute("placeholder") || "";
        list.appendChild(dt);
        list.appendChild(dd);
      });
    box.appendChild(list);
    document.body.appendChild(box);
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.altKey || event.metaKey || typing(event.target)) {
      if (event.key === "Escape" && typing(event.target)) event.target.blur();
      return;
    }
    if (event.key === "Escape") { var open = document.getElementById("key-help"); if (open) open.remove(); return; }
    if (event.key === "?") { event.preventDefault(); help(); return; }
    var el = targets().filter(function (t) { return t.dataset.key === event.key; })[0];
    if (!el) return;
    event.preventDefault();
    if (typing(el)) { el.focus(); if (el.select) el.select(); } else { el.click(); }
  });
})();

// The Content-Security-Policy refuses inline handlers (trainhub/core/csp.py): what they did is here.
// <form data-confirm="question"> (or its submit button) asks before it is sent; <a data-remove-closest="selector"> removes
// the closest such element (a results box) instead of following the link.
(function () {
  "use strict";
  document.addEventListener("submit", function (e) {
    // the button that sent the form may ask its own question (the job list's "Cancel selected")
    var el = e.submitter && e.submitter.hasAttribute("data-confirm") ? e.submitter : e.target;
    var question = el.getAttribute && el.getAttribute("data-confirm");
    if (question && !window.confirm(question)) e.preventDefault();
  }, true);
  // <button data-compare-selected> in the job list: open compare with only the checked ids (no
  // CSRF token in a URL), instead of sending the whole form by GET as it does without JavaScript
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("[data-compare-selected]");
    if (!button || !button.form) return;
    e.preventDefault();
    var ids = Array.from(button.form.querySelectorAll("input[name=ids]:checked"), function (c) { return c.value; });
    location.href = button.formAction + "?ids=" + ids.join(",");
  });
  document.addEventListener("click", function (e) {
    var link = e.target.closest && e.target.closest("[data-remove-closest]");
    if (!link) return;
    e.preventDefault();
    var box = link.closest(link.getAttribute("data-remove-closest"));
    if (box) box.remove();
  });
})();
