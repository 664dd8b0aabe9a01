// The theme chosen with the header's toggle (theme.js), set before the first paint: loaded
// without defer in <head>. A file, not an inline script: the Content-Security-Policy runs none.
try { var t = localStorage.getItem("theme"); if (t) document.documentElement.dataset.theme = t; } catch (e) {}
