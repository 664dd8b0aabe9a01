// The header's theme toggle: light ⇄ dark, remembered in this browser (localStorage "theme").
// Until it is used the system's preference applies (prefers-color-scheme). Charts read the
// colours when drawn, so the page reloads to redraw them in the new theme.
(function () {
  "use strict";
  var button = document.getElementById("theme-toggle");
  if (!button) return;
  var root = document.documentElement;
  function current() {
    return root.dataset.theme || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
  }
  function label() { button.textContent = current() === "dark" ? "Light theme" : "Dark theme"; }
  label();
  button.addEventListener("click", function () {
    var next = current() === "dark" ? "light" : "dark";
    root.dataset.theme = next;
    try { localStorage.setItem("theme", next); } catch (e) { /* private mode: this page only */ }
    label();
    if (document.querySelector(".uplot")) location.reload();
  });
})();
