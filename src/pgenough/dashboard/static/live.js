// The overview, live: re-render its tables from each snapshot the server pushes over
// server-sent events (<root>/events), and chart the backlog since the page opened.
// Plain DOM building with textContent, so nothing from the data is ever parsed as HTML.
//
// Extensions draw their own sections of the overview: their script (loaded after this one)
// calls pgenoughDashboard.section(name, render); render(data, view, dashboard) gets the
// section's data (view.sections[name]) at load and on every snapshot. The helpers below
// (formats, DOM building, the chart) are theirs too.
(function () {
  "use strict";

  var base = document.body.getAttribute("data-base") || "";
  var SPAN_MS = 30 * 60 * 1000; // the chart shows the last 30 minutes
  var MAX_POINTS = 720; // backlog samples kept (a tick every 5 s: an hour)
  var backlog = []; // [at (ms), jobs ready + scheduled + running]
  var lastAt = 0;
  var renderers = {};

  function count(v) {
    return v === null || v === undefined ? "—" : Math.round(v).toLocaleString("en-US");
  }
  function seconds(v) {
    if (v === null || v === undefined) return "—";
    if (v < 1) return Math.round(v * 1000) + " ms";
    if (v < 60) return (v < 10 ? v.toFixed(1) : Math.round(v)) + " s";
    var m = Math.floor(v / 60), s = Math.floor(v) % 60;
    if (m < 60) return m + " min " + s + " s";
    var h = Math.floor(m / 60);
    m = m % 60;
    if (h < 24) return h + " h " + m + " min";
    return Math.floor(h / 24) + " d " + (h % 24) + " h";
  }
  function rate(v) {
    if (v === null || v === undefined) return "—";
    return v >= 10 ? count(v) + "/s" : v.toFixed(1) + "/s";
  }
  function instant(v) {
    if (!v) return "—";
    return new Date(v).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC").replace(/Z$/, " UTC");
  }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }
  function td(text, cls) { return el("td", cls ? { "class": cls } : {}, [text]); }
  function pill(status) {
    return el("span", { "class": "pill st-" + String(status).toLowerCase() }, [String(status)]);
  }
  function empty(cols, text) {
    return el("tr", { "class": "empty" }, [el("td", { colspan: String(cols) }, [text])]);
  }
  function fill(tbody, rows) {
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    rows.forEach(function (r) { tbody.appendChild(r); });
  }
  function link(path, text) { return el("a", { href: base + path }, [text]); }

  function queueRow(q, name) {
    return el("tr", { "data-queue": q.queue }, [
      el("td", {}, [name]),
      td(count(q.ready), "num"),
      td(count(q.scheduled), "num"),
      td(count(q.running), "num"),
      td(count(q.dead), q.dead ? "num bad" : "num"),
      td(q.ready ? seconds(q.oldest_ready_age) : "—", "num"),
      td(count(q.dead_recently), q.dead_recently ? "num bad" : "num"),
      td(count(q.attempts_failed), "num"),
    ]);
  }

  function renderQueues(queues, total) {
    var rows = queues.map(function (q) {
      return queueRow(q, link("/jobs?queue=" + encodeURIComponent(q.queue), q.queue));
    });
    if (!rows.length) rows = [empty(8, "No jobs queued.")];
    fill(document.getElementById("queues-body"), rows);
    var totalRow = queueRow(total, "all queues");
    totalRow.setAttribute("class", "total");
    fill(document.getElementById("queues-total"), [totalRow]);
  }

  function renderFailures(total) {
    document.querySelectorAll("#failures .card").forEach(function (card) {
      var key = card.getAttribute("data-key");
      var value = total[key] || 0;
      card.querySelector(".value").textContent = count(value);
      var cls = key === "attempts_failed" ? "card-warn" : "card-bad";
      card.classList.toggle(cls, value > 0);
    });
  }

  function record(view) {
    var at = Date.parse(view.at);
    var t = view.total || { ready: 0, scheduled: 0, running: 0 };
    if (at > lastAt) {
      backlog.push([at, t.ready + t.scheduled + t.running]);
      if (backlog.length > MAX_POINTS) backlog.shift();
      lastAt = at;
    }
  }

  function svg(tag, attrs, text) {
    var node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A chart of the last 30 minutes up to `end` (ms): `bars` (a Map of minute (ms) to value,
  // scaled on the left, titled with barTitle(value, minute)) and `line` ([at (ms), value]
  // points, scaled on the right); either may be absent.
  function chart(node, opts) {
    while (node.firstChild) node.removeChild(node.firstChild);
    var W = 560, H = 200, L = 46, R = 46, T = 12, B = 24;
    var end = opts.end || Date.now(), start = end - SPAN_MS;
    var bars = opts.bars || new Map(), line = opts.line || [];
    var x = function (t) { return L + ((t - start) / SPAN_MS) * (W - L - R); };
    var barMax = 1, lineMax = 1;
    bars.forEach(function (v, m) { if (m >= start - 60000) barMax = Math.max(barMax, v); });
    line.forEach(function (p) { if (p[0] >= start) lineMax = Math.max(lineMax, p[1]); });
    var yBar = function (v) { return H - B - (v / barMax) * (H - B - T); };
    var yLine = function (v) { return H - B - (v / lineMax) * (H - B - T); };

    node.appendChild(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, "class": "axis" }));
    node.appendChild(svg("line", { x1: L, y1: T, x2: L, y2: H - B, "class": "axis" }));
    node.appendChild(svg("line", { x1: W - R, y1: T, x2: W - R, y2: H - B, "class": "axis" }));
    if (opts.bars) {
      node.appendChild(svg("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, count(barMax)));
      node.appendChild(svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, "0"));
    }
    if (opts.line) {
      node.appendChild(svg("text", { x: W - R + 4, y: T + 8 }, count(lineMax)));
      node.appendChild(svg("text", { x: W - R + 4, y: H - B }, "0"));
    }
    node.appendChild(svg("text", { x: L, y: H - 6 }, "−30 min"));
    node.appendChild(svg("text", { x: W - R, y: H - 6, "text-anchor": "end" }, "now"));

    var barW = Math.max(2, ((W - L - R) / 30) - 2);
    bars.forEach(function (v, minute) {
      if (minute < start - 60000 || minute > end) return;
      var left = Math.max(L, x(minute));
      var bar = svg("rect", { x: left, y: yBar(v), width: barW, height: H - B - yBar(v), "class": "tp" });
      if (opts.barTitle) bar.appendChild(svg("title", {}, opts.barTitle(v, minute)));
      node.appendChild(bar);
    });
    var points = line.filter(function (p) { return p[0] >= start; })
      .map(function (p) { return x(p[0]).toFixed(1) + "," + yLine(p[1]).toFixed(1); });
    if (points.length === 1) points.push((W - R) + "," + points[0].split(",")[1]);
    if (points.length) node.appendChild(svg("polyline", { points: points.join(" "), "class": "bl" }));
  }

  function drawBacklog() {
    var node = document.getElementById("chart");
    if (node) chart(node, { end: lastAt, line: backlog });
  }

  var dashboard = {
    base: base,
    span: SPAN_MS,
    format: { count: count, seconds: seconds, rate: rate, instant: instant },
    el: el, td: td, pill: pill, empty: empty, fill: fill, link: link, chart: chart,
    section: function (name, render) { renderers[name] = render; },
  };
  window.pgenoughDashboard = dashboard;

  function sections(view) {
    Object.keys(renderers).forEach(function (name) {
      var data = (view.sections || {})[name];
      if (data !== undefined) renderers[name](data, view, dashboard);
    });
  }

  function render(view) {
    renderQueues(view.queues || [], view.total || {});
    renderFailures(view.total || {});
    document.getElementById("as-of").textContent = instant(view.at);
    record(view);
    drawBacklog();
    sections(view);
  }

  function start() {
    var seed = document.getElementById("overview-data");
    if (seed) {
      var view = JSON.parse(seed.textContent);
      record(view);
      drawBacklog();
      sections(view);
    }
    var live = document.getElementById("live");
    var problem = document.getElementById("problem");
    function setLive(on, text) {
      live.textContent = text;
      live.className = "live " + (on ? "live-on" : "live-off");
    }
    if (!window.EventSource) {
      setLive(false, "live view unsupported: reload to refresh");
      return;
    }
    var source = new EventSource(base + "/events");
    source.onopen = function () { setLive(true, "live"); };
    source.onerror = function () { setLive(false, "reconnecting…"); };
    source.addEventListener("overview", function (e) {
      problem.hidden = true;
      render(JSON.parse(e.data));
    });
    source.addEventListener("problem", function (e) {
      problem.textContent = JSON.parse(e.data).message;
      problem.hidden = false;
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // After the extensions' scripts (they follow this one) have registered their sections.
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
