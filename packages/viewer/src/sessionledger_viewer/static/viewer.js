// sessionledger viewer: a session page left open at the end of its log follows new
// events without a reload. It asks the server for the events after the last one shown,
// an answer the server holds until the store acknowledges one (the live feed), and
// appends them as rows. Every value is set as text (textContent), never as markup:
// session content is untrusted.
"use strict";
(function () {
  const table = document.getElementById("events");
  if (!table || table.dataset.live !== "yes") return;
  const session = table.dataset.session;
  const body = table.tBodies[0];
  const status = document.getElementById("live");
  const length = document.getElementById("length");
  let after = Number(table.dataset.after);
  const base = "/sessions/" + encodeURIComponent(session);

  function link(href, text, className) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    if (className) a.className = className;
    return a;
  }

  function ranges(seqs) {
    const out = [];
    for (const seq of seqs) {
      const last = out[out.length - 1];
      if (last && seq === last[1] + 1) last[1] = seq; else out.push([seq, seq]);
    }
    return out;
  }

  function row(event) {
    const tr = document.createElement("tr");
    tr.id = "e" + event.seq;
    tr.className = "fresh" + (event.on_surface ? " node" : "");
    const cells = [];
    for (let i = 0; i < 6; i++) { cells.push(document.createElement("td")); tr.appendChild(cells[i]); }
    cells[0].className = "number";
    cells[0].appendChild(link(base + "/events/" + event.seq, String(event.seq)));
    cells[1].textContent = event.offset;
    cells[1].title = event.time;
    cells[2].textContent = event.type;
    cells[3].textContent = event.op;
    ranges(event.sources).forEach(function (range, index) {
      if (index) cells[4].appendChild(document.createTextNode(", "));
      const text = range[0] === range[1] ? String(range[0]) : range[0] + "–" + range[1];
      cells[4].appendChild(link(base + "/events/" + range[0], text, "source"));
    });
    cells[5].className = "text";
    cells[5].textContent = event.preview;
    return tr;
  }

  async function poll() {
    try {
      const url = "/api" + base + "/tail?wait=1&after=" + after;
      const response = await fetch(url, { cache: "no-store" });
      if (response.ok) {
        const tail = await response.json();
        for (const event of tail.events) { body.appendChild(row(event)); after = event.seq; }
        if (length) length.textContent = String(tail.length);
        if (status) status.textContent = "following new events · " + tail.length + " events";
        setTimeout(poll, 0);  // the server waits for the next event: ask again at once
        return;
      } else if (status) {
        status.textContent = "not following: the server answered " + response.status;
      }
    } catch (error) {
      if (status) status.textContent = "not following: the viewer stopped";
      return;
    }
    setTimeout(poll, 1000);
  }
  if (status) status.textContent = "following new events";
  setTimeout(poll, 0);
})();
