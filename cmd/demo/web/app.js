// The demo's live page: the actor graph, handlers, informer state, faults,
// traces and a key follower, fed by the demo's data API (see web.go). Plain
// DOM and SVG, no dependencies: every label is text in the document.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

  // ---------- formatting ----------

  const intFmt = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

  function fmtInt(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    return intFmt.format(v);
  }

  function fmtRate(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    if (v > 0 && v < 10) return v.toFixed(1) + "/s";
    return intFmt.format(v) + "/s";
  }

  function fmtMs(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    if (v === 0) return "0 ms";
    if (v < 0.01) return (v * 1000).toFixed(1) + " µs";
    if (v < 1) return v.toFixed(2) + " ms";
    if (v < 10) return v.toFixed(1) + " ms";
    if (v < 10000) return intFmt.format(v) + " ms";
    return (v / 1000).toFixed(1) + " s";
  }

  function fmtTime(s) {
    if (!s) return "–";
    const d = new Date(s);
    if (Number.isNaN(d.getTime())) return String(s);
    return d.toISOString().slice(11, 23);
  }

  function shortID(id) {
    return id ? String(id).slice(0, 8) : "";
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function setText(node, text) {
    if (node && node.textContent !== text) node.textContent = text;
  }

  // API errors: a JSON {"error"} body, else the status line.
  async function api(method, url, body) {
    const opts = { method, headers: {} };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(url, opts);
    } catch (e) {
      throw new Error("demo unreachable: " + e.message);
    }
    const txt = await resp.text();
    let data = null;
    try {
      data = txt ? JSON.parse(txt) : null;
    } catch (e) {
      data = null;
    }
    if (!resp.ok) {
      const msg = data && data.error ? data.error : (txt.trim() || resp.statusText);
      throw new Error(resp.status + ": " + msg);
    }
    return data;
  }

  // ---------- actor graph ----------

  const BOX_W = 150, BOX_H = 58, COL_GAP = 90, ROW_GAP = 12, PAD = 16;
  const KIND_COL = { reflector: 0, fifo: 1, indexer: 2, listener: 3 };
  let graphShape = "";
  let graphNodes = {}; // name -> {x, y, g}

  function graphKey(snap) {
    const st = (snap.stages || []).map((s) => s.kind + ":" + s.name).join(",");
    const ed = (snap.edges || []).map((e) => e.from + ">" + e.to).join(",");
    return st + "|" + ed + "|" + (snap.controller ? "ctl" : "");
  }

  function buildGraph(snap) {
    const g = $("#graph");
    g.replaceChildren();
    graphNodes = {};
    const stages = snap.stages || [];
    const cols = [[], [], [], [], []];
    for (const s of stages) {
      const c = KIND_COL[s.kind] ?? 3;
      cols[c].push(s);
    }
    const ctl = snap.controller && stages.some((s) => s.name === "controller" && s.kind === "listener");
    const rows = Math.max(1, ...cols.map((c) => c.length));
    const height = PAD * 2 + rows * BOX_H + (rows - 1) * ROW_GAP;
    const ncols = ctl ? 5 : 4;
    const width = PAD * 2 + ncols * BOX_W + (ncols - 1) * COL_GAP;
    g.setAttribute("viewBox", `0 0 ${width} ${height}`);
    g.setAttribute("width", width);
    g.setAttribute("height", height);

    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
    marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }));
    defs.append(marker);
    g.append(defs);
    const edgeLayer = svg("g", { class: "edges" });
    const nodeLayer = svg("g", { class: "nodes" });
    g.append(edgeLayer, nodeLayer);

    const place = (list, col) => {
      const colH = list.length * BOX_H + (list.length - 1) * ROW_GAP;
      const y0 = (height - colH) / 2;
      list.forEach((s, i) => {
        const x = PAD + col * (BOX_W + COL_GAP);
        const y = y0 + i * (BOX_H + ROW_GAP);
        graphNodes[s.name] = { x, y, kind: s.kind, g: addBox(nodeLayer, s.name, s.kind, x, y) };
      });
    };
    cols.forEach((list, c) => place(list, c));
    if (ctl) {
      const c = graphNodes.controller;
      const x = PAD + 4 * (BOX_W + COL_GAP);
      graphNodes["workqueue"] = { x, y: c.y, kind: "workqueue", g: addBox(nodeLayer, "workqueue", "workqueue", x, c.y) };
    }

    const edges = (snap.edges || []).slice();
    if (ctl) edges.push({ from: "controller", to: "workqueue", synthetic: true });
    for (const e of edges) {
      const a = graphNodes[e.from], b = graphNodes[e.to];
      if (!a || !b) continue;
      const x1 = a.x + BOX_W, y1 = a.y + BOX_H / 2, x2 = b.x - 2, y2 = b.y + BOX_H / 2;
      const mx = (x1 + x2) / 2;
      const path = svg("path", {
        d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`,
        class: "edge" + (e.synthetic ? " synthetic" : ""),
        "marker-end": "url(#arrow)",
        "data-edge-path": e.from + "->" + e.to,
      });
      edgeLayer.append(path);
      if (e.synthetic) continue;
      // Fan-out labels sit near their target so they do not overlap.
      const fan = a.kind === "indexer";
      const lx = fan ? x2 - 8 : mx;
      const ly = (fan ? y2 : Math.min(y1, y2)) - 6;
      edgeLayer.append(svg("text", {
        x: lx, y: ly, class: "edge-label", "text-anchor": fan ? "end" : "middle",
        "data-edge": e.from + "->" + e.to,
      }, "–"));
    }
  }

  function addBox(layer, name, kind, x, y) {
    const g = svg("g", { class: "stage kind-" + kind, "data-stage": name, "data-kind": kind, transform: `translate(${x},${y})` });
    g.append(svg("title", {}, kind === "listener" ? `listener of handler ${name}` : `${kind} actor`));
    g.append(svg("rect", { width: BOX_W, height: BOX_H, rx: 6, class: "box" }));
    g.append(svg("text", { x: 10, y: 18, class: "stage-name" }, name));
    g.append(svg("text", { x: BOX_W - 8, y: 18, class: "stage-kind", "text-anchor": "end" }, kind === name ? "" : kind));
    g.append(svg("text", { x: 10, y: 35, class: "stage-rate", "data-field": "rate" }, "–"));
    g.append(svg("text", { x: 10, y: 50, class: "stage-backlog", "data-field": "backlog" }, "–"));
    g.append(svg("text", { x: BOX_W - 8, y: 35, class: "stage-fault", "text-anchor": "end", "data-field": "fault" }, ""));
    layer.append(g);
    return g;
  }

  function updateGraph(snap) {
    const key = graphKey(snap);
    if (key !== graphShape) {
      buildGraph(snap);
      graphShape = key;
    }
    const faults = {};
    for (const h of snap.handlers || []) faults[h.name] = h.fault || "";
    for (const s of snap.stages || []) {
      const n = graphNodes[s.name];
      if (!n) continue;
      setText($('[data-field="rate"]', n.g), fmtRate(s.rate));
      const label = s.kind === "reflector" ? "behind " : s.kind === "listener" ? "backlog " : "queued ";
      setText($('[data-field="backlog"]', n.g), label + fmtInt(s.backlog));
      setText($('[data-field="fault"]', n.g), s.kind === "listener" ? faults[s.name] || "" : "");
      n.g.classList.toggle("warm", s.backlog > 100 && s.backlog <= 5000);
      n.g.classList.toggle("hot", s.backlog > 5000);
      n.g.classList.toggle("faulty", !!faults[s.name] && s.kind === "listener");
    }
    if (snap.controller && graphNodes.workqueue) {
      const n = graphNodes.workqueue;
      setText($('[data-field="rate"]', n.g), fmtRate(snap.controller.reconcile_rate) + " reconciled");
      setText($('[data-field="backlog"]', n.g), "depth " + fmtInt(snap.controller.workqueue_depth));
    }
    for (const e of snap.edges || []) {
      setText($(`[data-edge="${CSS.escape(e.from + "->" + e.to)}"]`), fmtRate(e.rate));
    }
  }

  // ---------- informer, controller, client-go ----------

  function updateDL(section, obj) {
    for (const dd of $$("dd[data-field]", section)) {
      const f = dd.dataset.field;
      let v = obj ? obj[f] : undefined;
      let text;
      if (typeof v === "boolean") text = v ? "yes" : "no";
      else if (f.endsWith("_rate") || f === "rate") text = fmtRate(v);
      else if (typeof v === "number") text = fmtInt(v);
      else text = v === undefined || v === null || v === "" ? "–" : String(v);
      setText(dd, text);
      if (typeof v === "boolean") dd.className = v ? "yes" : "no";
    }
  }

  // ---------- handler tables ----------

  const HANDLER_CELLS = ["rate", "backlog", "p50_ms", "p99_ms", "duration_p50_ms", "duration_p99_ms", "delivered", "panics"];

  function cellText(field, v) {
    if (field === "rate") return fmtRate(v);
    if (field.endsWith("_ms")) return fmtMs(v);
    return fmtInt(v);
  }

  function handlerRow(name, withFaults) {
    const tr = el("tr", { "data-handler": name });
    tr.append(el("th", { scope: "row", text: name }));
    for (const f of HANDLER_CELLS) tr.append(el("td", { class: "num", "data-field": f, text: "–" }));
    if (!withFaults) return tr;
    tr.append(el("td", { "data-field": "fault", class: "fault", text: "" }));
    const slowMs = el("input", { type: "number", min: "1", max: "60000", value: "5", class: "ms", "aria-label": `delay of ${name} in ms`, "data-input": "delay_ms" });
    const every = el("input", { type: "number", min: "1", max: "1000000", value: "50", class: "ms", "aria-label": `${name} panics every N-th event`, "data-input": "every" });
    const btn = (fault, label, title) => el("button", { type: "button", "data-fault": fault, "data-handler": name, title, text: label });
    tr.append(el("td", { class: "faults-only inject" },
      slowMs, el("span", { class: "unit", text: "ms" }), btn("slow", "slow", `${name} sleeps this long per event`),
      every, btn("panic", "panic", `${name} panics on every N-th event`),
      btn("stop", "stop", `${name} stops taking events (its backlog grows)`),
      btn("resume", "resume", `${name} back to normal`)));
    return tr;
  }

  function updateHandlerTable(tbody, handlers, withFaults) {
    const names = handlers.map((h) => h.name);
    const have = $$("tr[data-handler]", tbody).map((tr) => tr.dataset.handler);
    if (names.join("\n") !== have.join("\n")) {
      const old = {};
      for (const tr of $$("tr[data-handler]", tbody)) old[tr.dataset.handler] = tr;
      tbody.replaceChildren(...names.map((n) => old[n] || handlerRow(n, withFaults)));
    }
    for (const h of handlers) {
      const tr = $(`tr[data-handler="${CSS.escape(h.name)}"]`, tbody);
      for (const f of HANDLER_CELLS) setText($(`[data-field="${f}"]`, tr), cellText(f, h[f]));
      const fc = $('[data-field="fault"]', tr);
      if (fc) setText(fc, h.fault || "");
      tr.classList.toggle("faulty", !!h.fault);
      tr.classList.toggle("backlogged", h.backlog > 100);
    }
  }

  // ---------- faults ----------

  function faultMessage(text, isError, out) {
    const p = out || $("#fault-message");
    p.textContent = text;
    p.className = isError ? "error" : "ok";
  }

  async function sendFault(body, out) {
    faultMessage("sending " + body.fault + "…", false, out);
    try {
      const r = await api("POST", "/api/faults", body);
      faultMessage(r && r.message ? r.message : body.fault + ": ok", false, out);
    } catch (e) {
      faultMessage(e.message, true, out);
    }
  }

  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-fault]");
    if (!b) return;
    const fault = b.dataset.fault;
    const body = { fault };
    if (b.dataset.handler) {
      body.handler = b.dataset.handler;
      const row = b.closest("tr");
      if (fault === "slow") body.delay_ms = Number($('[data-input="delay_ms"]', row).value);
      if (fault === "panic") body.every = Number($('[data-input="every"]', row).value);
    }
    if (fault === "burst") body.count = Number($("#burst-count").value);
    if (b.dataset.member) body.member = b.dataset.member;
    if (fault === "partition") body.seconds = Number($("#partition-seconds").value);
    sendFault(body, b.closest("#members-section") ? $("#member-fault-message") : null);
  });

  // ---------- members of a sharded group ----------

  const MEMBER_COLORS = ["#2f6fdf", "#d8453a", "#2e9a53", "#8a63c9", "#d68a2e", "#2c9c8f", "#c94f9a", "#6b7a2a"];

  // memberColor is a member's colour, by the number in its name (m1, m2, ...).
  function memberColor(name) {
    const n = parseInt(String(name || "").replace(/^\D+/, ""), 10);
    return Number.isNaN(n) ? "#98a2b3" : MEMBER_COLORS[(n - 1) % MEMBER_COLORS.length];
  }

  function swatch(name) {
    return el("span", { class: "swatch", style: `background:${memberColor(name)}`, "aria-hidden": "true" });
  }

  const RING = { size: 220, outer: 100, inner: 62 };

  function arcPoint(r, a) {
    const c = RING.size / 2;
    return [c + r * Math.cos(a), c + r * Math.sin(a)];
  }

  // The ring: one segment per range, coloured by the member that delivers
  // it; grey when none does, striped red when two do.
  function updateRing(sh) {
    const g = $("#ring");
    const n = sh.owners.length;
    if (g.dataset.ranges !== String(n)) {
      g.dataset.ranges = String(n);
      g.replaceChildren();
      g.setAttribute("viewBox", `0 0 ${RING.size} ${RING.size}`);
      g.setAttribute("width", RING.size);
      g.setAttribute("height", RING.size);
      const defs = svg("defs");
      const pat = svg("pattern", { id: "doubled", width: "6", height: "6", patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
      pat.append(svg("rect", { width: "6", height: "6", fill: "#fde4e1" }), svg("rect", { width: "3", height: "6", fill: "#d8453a" }));
      defs.append(pat);
      g.append(defs);
      const gap = n > 1 ? Math.min(0.02, Math.PI / n / 4) : 0;
      for (let i = 0; i < n; i++) {
        const a0 = -Math.PI / 2 + (2 * Math.PI * i) / n + gap, a1 = -Math.PI / 2 + (2 * Math.PI * (i + 1)) / n - gap;
        const large = a1 - a0 > Math.PI ? 1 : 0;
        const [x0, y0] = arcPoint(RING.outer, a0), [x1, y1] = arcPoint(RING.outer, a1);
        const [x2, y2] = arcPoint(RING.inner, a1), [x3, y3] = arcPoint(RING.inner, a0);
        const d = n === 1
          ? `M ${RING.size / 2} ${RING.size / 2 - RING.outer} a ${RING.outer} ${RING.outer} 0 1 1 -0.01 0 Z M ${RING.size / 2} ${RING.size / 2 - RING.inner} a ${RING.inner} ${RING.inner} 0 1 0 0.01 0 Z`
          : `M ${x0} ${y0} A ${RING.outer} ${RING.outer} 0 ${large} 1 ${x1} ${y1} L ${x2} ${y2} A ${RING.inner} ${RING.inner} 0 ${large} 0 ${x3} ${y3} Z`;
        const seg = svg("path", { d, class: "range-seg", "data-range": String(i), "fill-rule": "evenodd" });
        seg.append(svg("title", {}, `range ${i}`));
        g.append(seg);
        if (n <= 32) {
          const [lx, ly] = arcPoint((RING.outer + RING.inner) / 2, (a0 + a1) / 2);
          g.append(svg("text", { x: lx, y: ly + 4, class: "range-label", "text-anchor": "middle" }, String(i)));
        }
      }
      g.append(svg("text", { x: RING.size / 2, y: RING.size / 2 - 4, class: "ring-center", "text-anchor": "middle" }, `${n} ranges`));
      g.append(svg("text", { x: RING.size / 2, y: RING.size / 2 + 14, class: "ring-sub", "text-anchor": "middle", "data-field": "ring-sub" }, ""));
    }
    let unserved = 0, doubled = 0;
    sh.owners.forEach((owners, i) => {
      const seg = $(`path[data-range="${i}"]`, g);
      const owner = owners.length === 1 ? owners[0] : "";
      seg.dataset.owner = owners.join(",");
      seg.setAttribute("fill", owners.length === 1 ? memberColor(owner) : owners.length === 0 ? "#e3e7ee" : "url(#doubled)");
      seg.classList.toggle("unserved", owners.length === 0);
      setText($("title", seg), `range ${i}: ` + (owners.length === 0 ? "delivered by no member now" : "delivered by " + owners.join(" and ")));
      if (owners.length === 0) unserved++;
      if (owners.length > 1) doubled++;
    });
    setText($('[data-field="ring-sub"]', g), unserved ? `${unserved} unserved` : doubled ? `${doubled} doubled` : "each served once");
    const legend = $("#ring-legend");
    const names = sh.members.filter((m) => m.state === "live" || m.state === "leaving").map((m) => m.name);
    if (legend.dataset.names !== names.join(",")) {
      legend.dataset.names = names.join(",");
      legend.replaceChildren(...names.map((nm) => el("span", { class: "legend-item" }, swatch(nm), nm)),
        el("span", { class: "legend-item" }, el("span", { class: "swatch unserved-swatch", "aria-hidden": "true" }), "none"));
    }
  }

  function memberRow(name) {
    const tr = el("tr", { "data-member": name });
    tr.append(el("th", { scope: "row" }, swatch(name), name));
    for (const f of ["state", "ranges"]) tr.append(el("td", { "data-field": f, text: "–" }));
    for (const f of ["cache_size", "stages"]) tr.append(el("td", { class: "num", "data-field": f, text: "–" }));
    tr.append(el("td", { "data-field": "handlers", text: "–" }));
    for (const f of ["backlog", "workqueue_depth"]) tr.append(el("td", { class: "num", "data-field": f, text: "–" }));
    tr.append(el("td", { "data-field": "mode", text: "–" }));
    const btn = (fault, label, title) => el("button", { type: "button", "data-fault": fault, "data-member": name, title, text: label });
    tr.append(el("td", { class: "inject" },
      btn("kill", "kill", `stop ${name} as a crash would: no goodbye; the others take its ranges once the provider drops it`),
      btn("leave", "leave", `${name} leaves gracefully: its ranges move make-before-break`),
      btn("partition", "partition", `drop every message between ${name} and the others for the seconds below`)));
    return tr;
  }

  function memberState(m) {
    let s = m.state;
    if (m.state === "killed") s += m.dropped ? ", dropped" : ", not yet dropped";
    if (m.partitioned_s > 0) s += `, partitioned ${Math.ceil(m.partitioned_s)} s`;
    if (m.state === "live" && !m.synced) s += ", syncing";
    if (m.failed) s += ": " + m.failed;
    return s;
  }

  function updateMembersTable(sh) {
    const tbody = $("#members tbody");
    const names = sh.members.map((m) => m.name);
    const have = $$("tr[data-member]", tbody).map((tr) => tr.dataset.member);
    if (names.join("\n") !== have.join("\n")) {
      const old = {};
      for (const tr of $$("tr[data-member]", tbody)) old[tr.dataset.member] = tr;
      tbody.replaceChildren(...names.map((n) => old[n] || memberRow(n)));
    }
    for (const m of sh.members) {
      const tr = $(`tr[data-member="${CSS.escape(m.name)}"]`, tbody);
      const gone = m.state === "killed" || m.state === "left";
      tr.classList.toggle("gone", gone);
      tr.classList.toggle("partitioned", m.partitioned_s > 0);
      tr.dataset.state = m.state;
      tr.dataset.ranges = (m.ranges || []).join(",");
      setText($('[data-field="state"]', tr), memberState(m));
      setText($('[data-field="ranges"]', tr), (m.ranges || []).length ? `${m.ranges.length}: ${m.ranges.join(" ")}` : gone ? "–" : "none");
      setText($('[data-field="cache_size"]', tr), gone ? "–" : fmtInt(m.cache_size));
      const st = m.stages || {};
      setText($('[data-field="stages"]', tr), gone ? "–" : [st.reflector, st.fifo, st.indexer].map((v) => intFmt.format(v || 0)).join(" · "));
      const hs = m.handlers || [];
      setText($('[data-field="handlers"]', tr), gone ? "–" : hs.map((h) => `${h.name} ${intFmt.format(h.rate || 0)}`).join(" · "));
      const backlog = hs.reduce((n, h) => n + (h.backlog || 0), 0);
      const bl = $('[data-field="backlog"]', tr);
      setText(bl, gone ? "–" : fmtInt(backlog));
      bl.title = hs.map((h) => `${h.name}: ${fmtInt(h.backlog)} waiting`).join("\n");
      setText($('[data-field="workqueue_depth"]', tr), gone || m.workqueue_depth === undefined ? "–" : fmtInt(m.workqueue_depth));
      const mode = $('[data-field="mode"]', tr);
      setText(mode, gone ? "–" : m.mode);
      mode.title = `${fmtInt(m.filtered)} objects received outside its ranges, dropped on the client`;
      for (const b of $$("button[data-member]", tr)) b.disabled = m.state !== "live";
    }
  }

  function fmtAt(s) {
    return s === null || s === undefined ? "–" : "+" + s.toFixed(1) + " s";
  }

  function updateTimeline(sh, ranges) {
    const tbody = $("#handovers tbody");
    const list = sh.handovers || [];
    const key = list.map((h) => `${h.at_s}/${h.range}/${h.to}`).join(",");
    if (tbody.dataset.key === key) return;
    tbody.dataset.key = key;
    if (!list.length) {
      tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: "7", text: "no range has moved yet" })));
      return;
    }
    tbody.replaceChildren(...list.map((h) => el("tr", { "data-kind": h.kind, "data-range": String(h.range), "data-from": h.from, "data-to": h.to },
      el("td", { class: "num", text: fmtAt(h.at_s), title: h.start }),
      el("td", { class: "num", text: `${h.range}/${ranges}` }),
      el("td", {}, h.from ? swatch(h.from) : null, h.from || "–", " → ", swatch(h.to), h.to),
      el("td", { class: "kind-" + h.kind, text: h.kind }),
      el("td", { class: "num", text: fmtMs(h.took_ms) }),
      el("td", { class: "num", text: h.release_ms === null ? "–" : fmtMs(h.release_ms) }),
      el("td", { class: "num", text: h.gap_ms === null ? "–" : fmtMs(h.gap_ms) }))));
  }

  function updateMembers(snap) {
    const sh = snap.shard;
    $("#members-section").hidden = !sh;
    document.body.classList.toggle("sharded", !!sh);
    if (!sh) return;
    const live = sh.members.filter((m) => m.state === "live").length;
    setText($("#members-hint"), `sharded informer group "${sh.group}": ${sh.ranges} ranges of ${sh.hash_field}, ${live} live member${live === 1 ? "" : "s"}; the provider drops a killed member after ${(sh.member_ttl_ms / 1000).toFixed(1)} s`);
    setText($("#shard-mode"), `filter: ${sh.mode}, ${sh.mode_note}`);
    const unserved = sh.owners.filter((o) => o.length === 0).length;
    const doubled = sh.owners.filter((o) => o.length > 1).length;
    const cluster = sh.cluster_objects;
    setText($('#shard-totals [data-field="totals"]'),
      (cluster === null ? "cluster: a real one (not counted)" : `cluster ${fmtInt(cluster)} pods`) +
      ` · members cache ${fmtInt(sh.cached)} (${fmtInt(sh.distinct)} keys)`);
    const check = $("#shard-check");
    let text = "", cls = "";
    if (sh.distinct < sh.cached) {
      text = `${fmtInt(sh.cached - sh.distinct)} keys cached by two members`;
      cls = "error";
    } else if (doubled) {
      text = `${doubled} ranges delivered by two members`;
      cls = "error";
    } else if (unserved) {
      text = `${unserved} range${unserved === 1 ? "" : "s"} unserved now`;
      cls = "warn";
    } else if (cluster !== null && sh.cached === cluster) {
      text = "= nothing lost, nothing doubled";
      cls = "ok";
    } else if (cluster !== null) {
      text = `${cluster > sh.cached ? "−" : "+"}${fmtInt(Math.abs(cluster - sh.cached))}: events on their way`;
      cls = "hint";
    }
    check.textContent = text;
    check.className = cls;
    check.dataset.equal = String(cluster !== null && sh.cached === cluster && sh.distinct === sh.cached && !unserved && !doubled);
    $('#member-faults [data-fault="add"]').disabled = !sh.can_add;
    updateRing(sh);
    updateMembersTable(sh);
    updateTimeline(sh, sh.ranges);
  }

  // ---------- snapshots ----------

  let lastSnapshotAt = 0;

  function applySnapshot(snap) {
    if (!snap) return;
    lastSnapshotAt = Date.now();
    setText($("#mode"), snap.mode === "cluster" ? "real cluster" : "simulated cluster");
    setText($("#uptime"), fmtInt(snap.uptime_s));
    document.body.classList.toggle("no-faults", !snap.faults_enabled);
    $("#global-faults").hidden = !snap.faults_enabled || snap.mode !== "simulated";
    setText($("#informer-title"), snap.shard ? "Informers of every member" : "Informer");
    setText($("#handlers-hint"), snap.shard
      ? "summed over every member; a fault applies to that handler on every live member"
      : "latency = watch → handler call; duration = the call itself");
    updateMembers(snap);
    updateGraph(snap);
    updateDL($("#informer"), snap.informer || {});
    $("#controller").hidden = !snap.controller;
    if (snap.controller) updateDL($("#controller"), snap.controller);
    const cg = snap.clientgo;
    $("#clientgo").hidden = !cg;
    $("#clientgo-handlers-wrap").hidden = !cg;
    if (cg) {
      updateDL($("#clientgo"), cg);
      updateHandlerTable($("#clientgo-handlers tbody"), cg.handlers || [], false);
    }
    updateHandlerTable($("#handlers tbody"), snap.handlers || [], true);
  }

  function setConn(text, cls) {
    const c = $("#conn");
    setText(c, text);
    c.className = cls;
  }

  function connect() {
    api("GET", "/api/snapshot").then(applySnapshot).catch((e) => setConn(e.message, "conn-bad"));
    if (!window.EventSource) {
      setInterval(() => api("GET", "/api/snapshot").then(applySnapshot).catch((e) => setConn(e.message, "conn-bad")), 1000);
      setConn("polling", "conn-ok");
      return;
    }
    const es = new EventSource("/api/stream");
    es.addEventListener("open", () => setConn("live", "conn-ok"));
    es.addEventListener("error", () => setConn("reconnecting…", "conn-bad"));
    es.addEventListener("snapshot", (ev) => {
      setConn("live", "conn-ok");
      try {
        applySnapshot(JSON.parse(ev.data));
      } catch (e) {
        setConn("bad snapshot: " + e.message, "conn-bad");
      }
    });
    setInterval(() => {
      if (lastSnapshotAt && Date.now() - lastSnapshotAt > 5000) setConn("no update for " + Math.round((Date.now() - lastSnapshotAt) / 1000) + " s", "conn-bad");
    }, 1000);
  }

  // ---------- waterfalls ----------

  function stageCount(t) {
    if (Array.isArray(t.stages)) return t.stages.length;
    if (typeof t.stages === "number") return t.stages;
    return new Set((t.spans || []).map((s) => s.stage).filter(Boolean)).size;
  }

  // Spans in tree order (depth-first, children by start), with their depth.
  function spanTree(spans) {
    const byID = new Map(spans.map((s) => [s.span_id, s]));
    const kids = new Map();
    const roots = [];
    for (const s of spans) {
      if (s.parent_id && byID.has(s.parent_id) && s.parent_id !== s.span_id) {
        if (!kids.has(s.parent_id)) kids.set(s.parent_id, []);
        kids.get(s.parent_id).push(s);
      } else roots.push(s);
    }
    const byStart = (a, b) => (a.start_ms - b.start_ms) || String(a.name).localeCompare(String(b.name));
    const out = [];
    const seen = new Set();
    const walk = (s, depth) => {
      if (seen.has(s.span_id)) return;
      seen.add(s.span_id);
      out.push({ s, depth });
      for (const c of (kids.get(s.span_id) || []).sort(byStart)) walk(c, depth + 1);
    };
    for (const r of roots.sort(byStart)) walk(r, 0);
    return out;
  }

  // spanClass colours a span's bar by what made it: the span names of
  // docs/tracing.md (reflector.receive, fifo.queue, indexer.apply,
  // listener.deliver, handler, workqueue.process, ...).
  function spanClass(name) {
    const n = String(name || "");
    for (const p of ["reflector", "fifo", "indexer", "listener", "workqueue"]) {
      if (n === p || n.startsWith(p + ".")) return "span-" + p;
    }
    return n === "handler" ? "span-handler" : "span-other";
  }

  function renderTrace(t) {
    const spans = t.spans || [];
    const end = Math.max(t.duration_ms || 0, ...spans.map((s) => (s.start_ms || 0) + (s.duration_ms || 0)), 0.001);
    const nStages = stageCount(t);
    const root = spans.find((s) => s.attrs && s.attrs["actorinformer.delta.type"]);
    const wf = el("div", {
      class: "waterfall", "data-trace-id": t.trace_id, "data-stages": String(nStages), "data-start": t.start || "",
      "data-key": t.key || "", "data-delta-type": root ? root.attrs["actorinformer.delta.type"] : "",
    });
    wf.append(el("div", { class: "wf-head" },
      el("strong", { class: "wf-root", text: t.root || (spans[0] && spans[0].name) || "trace" }),
      t.key ? el("span", { class: "wf-key", text: t.key }) : null,
      t.member ? el("span", { class: "wf-member", "data-member": t.member }, swatch(t.member), t.member) : null,
      t.range !== undefined && t.range !== null ? el("span", { class: "wf-range", "data-range": String(t.range), text: "range " + t.range }) : null,
      el("span", { class: "wf-dur", text: fmtMs(t.duration_ms) }),
      el("span", { class: "wf-stages", text: nStages + " stages" }),
      el("span", { class: "wf-time", text: fmtTime(t.start) }),
      el("code", { class: "wf-id", title: t.trace_id, text: shortID(t.trace_id) })));
    const axis = el("div", { class: "wf-row wf-axis", "aria-hidden": "true" }, el("div", { class: "span-label" }));
    const ticks = el("div", { class: "span-track" });
    for (const f of [0, 0.25, 0.5, 0.75, 1]) {
      ticks.append(el("span", { class: "tick", style: `left:${f * 100}%`, text: fmtMs(end * f) }));
    }
    axis.append(ticks);
    wf.append(axis);
    for (const { s, depth } of spanTree(spans)) {
      const left = Math.min(100, Math.max(0, ((s.start_ms || 0) / end) * 100));
      const width = Math.max(0.4, Math.min(100 - left, ((s.duration_ms || 0) / end) * 100));
      const row = el("div", {
        class: "wf-row span-row", role: "button", tabindex: "0",
        "data-span-id": s.span_id, "data-span-name": s.name, "data-stage": s.stage || "",
        "aria-label": `${s.name} ${fmtMs(s.duration_ms)}`,
      });
      row._span = s;
      row._trace = t;
      const label = el("div", { class: "span-label", style: `padding-left:${depth * 14 + 4}px` },
        el("span", { class: "span-name", text: s.name }),
        s.attrs && s.attrs["actorinformer.handler.name"] ? el("span", { class: "span-handler", text: s.attrs["actorinformer.handler.name"] }) : null);
      for (const l of s.links || []) {
        label.append(el("button", {
          type: "button", class: "link", "data-link-trace": l.trace_id, "data-link-span": l.span_id,
          title: `linked span ${l.span_id} in trace ${l.trace_id}`, text: "↪ " + shortID(l.trace_id),
        }));
      }
      const track = el("div", { class: "span-track" },
        el("div", { class: "span-bar " + spanClass(s.name), style: `left:${left}%;width:${width}%` }),
        // The duration sits right of the bar, or left of it near the end.
        left + width > 85
          ? el("span", { class: "span-dur before", style: `right:${100 - left}%`, text: fmtMs(s.duration_ms) })
          : el("span", { class: "span-dur", style: `left:${left + width}%`, text: fmtMs(s.duration_ms) }));
      row.append(label, track);
      wf.append(row);
    }
    return wf;
  }

  function showSpan(s, t, row) {
    $$(".span-row.selected").forEach((r) => r.classList.remove("selected"));
    if (row) row.classList.add("selected");
    const d = $("#span-detail");
    const rows = [
      ["name", s.name], ["stage", s.stage || "–"], ["trace", t.trace_id], ["span", s.span_id],
      ["parent", s.parent_id || "–"], ["start", "+" + fmtMs(s.start_ms)], ["duration", fmtMs(s.duration_ms)],
    ];
    const dl = el("dl", { id: "span-attrs" });
    for (const [k, v] of rows) dl.append(el("dt", { text: k }), el("dd", { class: /id$|^trace$|^span$|^parent$/.test(k) ? "id" : null, text: String(v) }));
    const keys = Object.keys(s.attrs || {}).sort();
    for (const k of keys) dl.append(el("dt", { class: "attr", text: k }), el("dd", { "data-attr": k, text: String(s.attrs[k]) }));
    const links = el("ul", { class: "span-links" });
    for (const l of s.links || []) {
      links.append(el("li", {}, el("button", {
        type: "button", class: "link", "data-link-trace": l.trace_id, "data-link-span": l.span_id,
        text: `open linked trace ${shortID(l.trace_id)} (span ${shortID(l.span_id)})`,
      })));
    }
    d.replaceChildren(el("h3", { text: "Span " + s.name }), dl, (s.links || []).length ? el("h4", { text: "links" }) : null, (s.links || []).length ? links : null);
  }

  async function openTrace(id, spanID) {
    const wrap = $("#trace-opened-wrap");
    const box = $("#trace-opened");
    wrap.hidden = false;
    box.replaceChildren(el("p", { class: "hint", text: "loading trace " + shortID(id) + "…" }));
    try {
      const t = await api("GET", "/api/trace?id=" + encodeURIComponent(id));
      box.replaceChildren(renderTrace(t));
      const row = spanID ? $(`.span-row[data-span-id="${CSS.escape(spanID)}"]`, box) : null;
      if (row) showSpan(row._span, row._trace, row);
    } catch (e) {
      box.replaceChildren(el("p", { class: "error", text: `trace ${shortID(id)}: ${e.message}` }));
    }
    wrap.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("click", (ev) => {
    const link = ev.target.closest("button[data-link-trace]");
    if (link) {
      ev.stopPropagation();
      // A link into the same waterfall (a processing trace shown with the
      // delta it continues) selects the linked span there.
      const wf = link.closest(".waterfall");
      const target = wf && wf.dataset.traceId === link.dataset.linkTrace &&
        $(`.span-row[data-span-id="${CSS.escape(link.dataset.linkSpan)}"]`, wf);
      if (target) {
        showSpan(target._span, target._trace, target);
        target.focus();
        return;
      }
      openTrace(link.dataset.linkTrace, link.dataset.linkSpan);
      return;
    }
    const row = ev.target.closest(".span-row");
    if (row && row._span) showSpan(row._span, row._trace, row);
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter" && ev.key !== " ") return;
    const row = ev.target.closest && ev.target.closest(".span-row");
    if (row && row._span && ev.target === row) {
      ev.preventDefault();
      showSpan(row._span, row._trace, row);
    }
  });
  $("#trace-close").addEventListener("click", () => {
    $("#trace-opened-wrap").hidden = true;
    $("#trace-opened").replaceChildren();
  });

  // Replaces box's waterfalls only when the set of traces changed, so a
  // selected span stays selected between polls.
  function showTraces(box, traces, empty) {
    const ids = "ids:" + traces.map((t) => t.trace_id).join(",");
    if (box.dataset.ids === ids && box.childElementCount) return;
    box.dataset.ids = ids;
    const sel = $(".span-row.selected", box);
    const selID = sel && sel.dataset.spanId;
    if (!traces.length) {
      box.replaceChildren(el("p", { class: "hint", text: empty }));
      return;
    }
    box.replaceChildren(...traces.map(renderTrace));
    if (selID) {
      const r = $(`.span-row[data-span-id="${CSS.escape(selID)}"]`, box);
      if (r) r.classList.add("selected");
    }
  }

  let traceView = "recent";

  async function pollTraces() {
    if ($("#traces-pause").checked) return;
    try {
      const r = await api("GET", `/api/traces?view=${traceView}&limit=6`);
      setText($("#traces-error"), "");
      showTraces($("#traces"), (r && r.traces) || [], "No traces yet (sampled deltas appear here).");
    } catch (e) {
      setText($("#traces-error"), e.message);
    }
  }

  for (const b of $$("button[data-view]")) {
    b.addEventListener("click", () => {
      traceView = b.dataset.view;
      for (const o of $$("button[data-view]")) o.setAttribute("aria-pressed", String(o === b));
      $("#traces").dataset.ids = "";
      pollTraces();
    });
  }

  // ---------- key follower ----------

  let watchedKey = "";
  let keyTimer = null;

  async function pollKey() {
    const key = watchedKey;
    if (!key) return;
    try {
      const r = await api("GET", "/api/key?key=" + encodeURIComponent(key));
      if (key !== watchedKey) return;
      setText($("#key-error"), "");
      $("#key-result").hidden = false;
      const deltas = (r && r.deltas) || [];
      setText($("#key-status"), `${r.key}: ${deltas.length} recent delta${deltas.length === 1 ? "" : "s"}` +
        (r.watching ? `, traced whatever the sampling until ${fmtTime(r.until)}` : ""));
      const tbody = $("#key-deltas tbody");
      const rows = deltas.slice().reverse().map((d) => el("tr", { "data-delta": d.type, "data-rv": d.rv },
        el("td", { text: fmtTime(d.time) }),
        el("td", { text: d.type }),
        el("td", { text: String(d.rv ?? "") }),
        el("td", {}, d.trace_id ? el("button", { type: "button", class: "link", "data-link-trace": d.trace_id, text: shortID(d.trace_id) }) : "not traced")));
      if (!rows.length) rows.push(el("tr", { class: "empty" }, el("td", { colspan: "4", text: "no delta of this key seen yet; it is watched from now on" })));
      tbody.replaceChildren(...rows);
      // The API lists the traces of the latest deltas first.
      showTraces($("#key-traces"), ((r && r.traces) || []).slice(0, 2), "No trace of this key yet.");
      showKeyShard(r && r.shard);
    } catch (e) {
      if (key === watchedKey) setText($("#key-error"), e.message);
    }
  }

  // The key's range and members, and its range's handover spans.
  function showKeyShard(ks) {
    const p = $("#key-owner");
    $("#key-shard").hidden = !ks;
    if (!ks) {
      p.replaceChildren();
      return;
    }
    if (ks.range === null) {
      p.replaceChildren("Found in no member's cache nor in the cluster: its range is not known.");
      $("#key-handovers").replaceChildren();
      $("#key-shard").hidden = true;
      p.dataset.owner = "";
      return;
    }
    p.dataset.owner = ks.owner || "";
    p.dataset.range = String(ks.range);
    p.replaceChildren(`Range ${ks.range} · owner `, ks.owner ? swatch(ks.owner) : "", el("strong", { text: ks.owner || "none" }),
      ` · delivered by ${ks.delivering.length ? ks.delivering.join(" and ") : "no member now"}` +
      ` · cached by ${ks.cached_by.length ? ks.cached_by.join(" and ") : "no member"} (UID read from the ${ks.found})`);
    showTraces($("#key-handovers"), ks.handovers || [], "No handover span of this range kept.");
  }

  function stopKey() {
    if (keyTimer) clearInterval(keyTimer);
    keyTimer = null;
    if (watchedKey) api("DELETE", "/api/key?key=" + encodeURIComponent(watchedKey)).catch(() => {});
    watchedKey = "";
    $("#key-result").hidden = true;
    $("#key-stop").hidden = true;
    $("#key-traces").dataset.ids = "";
    $("#key-traces").replaceChildren();
    $("#key-handovers").dataset.ids = "";
    $("#key-handovers").replaceChildren();
    $("#key-owner").replaceChildren();
    $("#key-shard").hidden = true;
    $("#key-deltas tbody").replaceChildren();
    setText($("#key-status"), "");
  }

  $("#key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = $("#key-input").value.trim();
    if (!key) {
      setText($("#key-error"), "type a key: namespace/name");
      return;
    }
    if (key !== watchedKey) stopKey();
    watchedKey = key;
    $("#key-stop").hidden = false;
    setText($("#key-error"), "");
    pollKey();
    if (keyTimer) clearInterval(keyTimer);
    keyTimer = setInterval(pollKey, 2000);
  });
  $("#key-stop").addEventListener("click", stopKey);

  // ---------- start ----------

  connect();
  pollTraces();
  setInterval(pollTraces, 3000);
})();
