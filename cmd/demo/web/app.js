// A stub: shows the latest snapshot of /api/stream as JSON.
"use strict";
const out = document.getElementById("snapshot");
const es = new EventSource("/api/stream");
es.addEventListener("snapshot", (e) => {
  out.textContent = JSON.stringify(JSON.parse(e.data), null, 2);
});
