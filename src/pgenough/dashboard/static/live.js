// The overview, live: re-render its tables, its cards and its history charts from each
// snapshot the server pushes over server-sent events (<root>/events). The history is the
// server's (the workers' per-minute counts and backlog samples): each snapshot carries every
// queue's last hour; a page showing another window or one queue reads <root>/api/history
// after snapshots, as often as its buckets can change.
// Plain DOM building with textContent, so nothing from the data is ever parsed as HTML.
//
// Extensions draw their own sections of the overview: their script (loaded after this one)
// calls pgenoughDashboard.section(name, render); render(data, view, dashboard) gets the
// section's data (view.sections[name]) at load and on every snapshot. The helpers below
// (formats, DOM building, the chart) are theirs too.
(function () {
  "use strict";

  var base = document.body.getAttribute("data-base") || "";
  var SPAN_MS = 30 * 60 * 1000; // an extension's chart shows the last 30 minutes by default
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
  // An axis's seconds, short enough for its margin: 45 s, 1.5 min, 12 min, 2.5 h.
  function shortSeconds(v) {
    if (v < 60) return Math.round(v) + " s";
    if (v < 3600) return (v < 600 ? (v / 60).toFixed(1) : Math.round(v / 60)) + " min";
    return (v < 36000 ? (v / 3600).toFixed(1) : Math.round(v / 3600)) + " h";
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
  function query(params) {
    return Object.keys(params).map(function (k) {
      return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]);
    }).join("&");
  }

  // -- the chart ----------------------------------------------------------------------------

  function svg(tag, attrs, text) {
    var node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A chart from `start` to `end` (ms; default the last `span` ms, 30 minutes, up to now):
  // - `bars`: a Map of a bucket's start (ms) to its value, `step` ms wide (default a
  //   minute), scaled on the left, each titled with barTitle(value, start);
  // - `lines`: [{points: [[at (ms), value or null]], cls, right}], scaled on the right when
  //   `right`, else on the left; null breaks a line, a lone point is a dot;
  // - `line`: one such line's points, on the right (class "bl");
  // - `hover(start)`: a title for each bucket, over the chart's whole height;
  // - `left`, `right`: how each axis writes its values (default counts).
  function chart(node, opts) {
    while (node.firstChild) node.removeChild(node.firstChild);
    var W = 560, H = 200, L = 46, R = 46, T = 12, B = 24;
    var end = opts.end || Date.now();
    var start = opts.start !== undefined ? opts.start : end - (opts.span || SPAN_MS);
    var span = Math.max(1, end - start), step = opts.step || 60000;
    var bars = opts.bars || new Map();
    var lines = (opts.lines || []).slice();
    if (opts.line) lines.push({ points: opts.line, cls: "bl", right: true });
    var leftFmt = opts.left || count, rightFmt = opts.right || count;
    var x = function (t) { return L + ((t - start) / span) * (W - L - R); };
    var visible = function (t) { return t + step > start && t <= end; };
    var leftMax = 0, rightMax = 0;
    bars.forEach(function (v, t) { if (visible(t)) leftMax = Math.max(leftMax, v); });
    lines.forEach(function (l) {
      l.points.forEach(function (p) {
        if (p[1] === null || p[0] < start || p[0] > end) return;
        if (l.right) rightMax = Math.max(rightMax, p[1]); else leftMax = Math.max(leftMax, p[1]);
      });
    });
    leftMax = leftMax || 1;
    rightMax = rightMax || 1;
    var y = function (v, right) { return H - B - (v / (right ? rightMax : leftMax)) * (H - B - T); };

    node.appendChild(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, "class": "axis" }));
    node.appendChild(svg("line", { x1: L, y1: T, x2: L, y2: H - B, "class": "axis" }));
    node.appendChild(svg("line", { x1: W - R, y1: T, x2: W - R, y2: H - B, "class": "axis" }));
    var hasLeft = opts.bars || lines.some(function (l) { return !l.right; });
    var hasRight = lines.some(function (l) { return l.right; });
    if (hasLeft) {
      node.appendChild(svg("text", { x: L - 4, y: T + 8, "text-anchor": "end", "class": "max-left" }, leftFmt(leftMax)));
      node.appendChild(svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, "0"));
    }
    if (hasRight) {
      node.appendChild(svg("text", { x: W - R + 4, y: T + 8, "class": "max-right" }, rightFmt(rightMax)));
      node.appendChild(svg("text", { x: W - R + 4, y: H - B }, "0"));
    }
    node.appendChild(svg("text", { x: L, y: H - 6 }, "−" + (opts.startLabel || shortSeconds(span / 1000))));
    node.appendChild(svg("text", { x: W - R, y: H - 6, "text-anchor": "end" }, "now"));

    var slot = (step / span) * (W - L - R);
    var barW = Math.max(1, slot - Math.min(2, slot * 0.25));
    bars.forEach(function (v, t) {
      if (!visible(t) || !v) return;
      var left = Math.max(L, x(t));
      var width = Math.max(1, Math.min(barW, W - R - left));
      var bar = svg("rect", { x: left.toFixed(1), y: y(v).toFixed(1), width: width.toFixed(1),
        height: (H - B - y(v)).toFixed(1), "class": "tp" });
      if (opts.barTitle) bar.appendChild(svg("title", {}, opts.barTitle(v, t)));
      node.appendChild(bar);
    });
    lines.forEach(function (l) {
      var run = [];
      function flush() {
        if (run.length === 1) {
          var p = run[0].split(",");
          node.appendChild(svg("circle", { cx: p[0], cy: p[1], r: 2.5, "class": l.cls + " dot" }));
        } else if (run.length > 1) {
          node.appendChild(svg("polyline", { points: run.join(" "), "class": l.cls }));
        }
        run = [];
      }
      l.points.forEach(function (p) {
        if (p[0] < start || p[0] > end) return;
        if (p[1] === null || p[1] === undefined) { flush(); return; }
        run.push(x(p[0]).toFixed(1) + "," + y(p[1], l.right).toFixed(1));
      });
      flush();
    });
    if (opts.hover) {
      // Last, so that each bucket's title is what the pointer finds, over bars and lines.
      for (var t = start; t < end; t += step) {
        var cell = svg("rect", { x: x(t).toFixed(1), y: T, width: Math.max(1, slot).toFixed(1),
          height: H - B - T, "class": "hover" });
        cell.appendChild(svg("title", {}, opts.hover(t)));
        node.appendChild(cell);
      }
    }
  }

  // -- the overview's own parts -------------------------------------------------------------

  var historyNode = document.getElementById("history");
  var chosen = historyNode ? {
    window: historyNode.getAttribute("data-window"),
    queue: historyNode.getAttribute("data-queue"),
    step: parseFloat(historyNode.getAttribute("data-step")) || 60,
    isDefault: historyNode.getAttribute("data-default") === "1",
  } : null;

  function queueMarks(q, name) {
    var cells = [name];
    if (q.paused) cells.push(el("span", { "class": "pill st-paused",
      title: "no worker claims its jobs until it is resumed" }, ["paused"]));
    if (q.max_running) cells.push(el("span", { "class": "pill st-limit",
      title: "at most this many of its jobs run at once across every worker" },
      ["limit " + q.max_running]));
    if (q.rate_count) cells.push(el("span", { "class": "pill st-limit",
      title: "at most this many of its jobs start in any such interval across every worker;"
        + " the others wait, ready" }, ["rate " + q.rate_count + "/" + q.rate_interval + "s"]));
    return cells;
  }

  function queueRow(q, name) {
    var trend = { window: chosen ? chosen.window : "1h" };
    if (q.queue) trend.queue = q.queue;
    var done = el("a", { href: base + "/?" + query(trend) + "#history", "class": "trend",
      title: (q.queue || "all queues") + " over time" }, [count(q.done)]);
    var row = el("tr", { "data-queue": q.queue }, [
      el("td", {}, queueMarks(q, name)),
      td(count(q.ready), "num"),
      td(count(q.scheduled), "num"),
      td(count(q.running), "num"),
      td(count(q.dead), q.dead ? "num bad" : "num"),
      td(q.ready ? seconds(q.oldest_ready_age) : "—", "num"),
      el("td", { "class": "num" }, [done]),
      td(count(q.dead_recently), q.dead_recently ? "num bad" : "num"),
      td(count(q.attempts_failed), "num"),
    ]);
    if (chosen && chosen.queue && q.queue === chosen.queue) row.setAttribute("class", "chosen");
    return row;
  }

  function renderQueues(queues, total) {
    var rows = queues.map(function (q) {
      return queueRow(q, link("/jobs?queue=" + encodeURIComponent(q.queue), q.queue));
    });
    if (!rows.length) rows = [empty(9, "No jobs queued.")];
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

  function renderFleet(f) {
    var workers = document.getElementById("workers-card");
    var periodic = document.getElementById("periodic-card");
    if (!f || !workers || !periodic) return;
    workers.querySelector(".value").textContent = count(f.workers_alive);
    workers.querySelector(".label").firstChild.textContent =
      (f.workers_alive === 1 ? "worker" : "workers") + " alive";
    workers.querySelector(".gone").textContent = f.workers_gone ? " · " + count(f.workers_gone) + " gone" : "";
    workers.classList.toggle("card-warn", !f.workers_alive || f.workers_gone > 0);
    periodic.querySelector(".value").textContent = count(f.periodic_overdue);
    periodic.querySelector(".label").firstChild.textContent =
      "periodic " + (f.periodic_overdue === 1 ? "task" : "tasks") + " overdue ";
    periodic.querySelector(".of").textContent = "of " + count(f.periodic);
    periodic.classList.toggle("card-bad", f.periodic_overdue > 0);
  }

  function renderHistory(h) {
    if (!historyNode || !h || !h.points) return;
    var step = h.step * 1000;
    var points = h.points.map(function (p) { return { at: Date.parse(p.at), p: p }; });
    var start = points.length ? points[0].at : Date.now() - h.seconds * 1000;
    var end = points.length ? points[points.length - 1].at + step : Date.now();
    var byStart = {};
    points.forEach(function (q) { byStart[q.at] = q.p; });
    function hover(t) {
      var p = byStart[t];
      var when = instant(new Date(t).toISOString());
      if (!p) return when;
      return when + " (" + h.per + "): " + count(p.completed) + " completed, " + count(p.failed) +
        " failed attempts, " + count(p.dead) + " dead-lettered; ready " + count(p.ready) +
        ", running " + count(p.running) + ", oldest ready " + seconds(p.oldest_ready_age);
    }
    function middle(key) {
      return points.map(function (q) { return [q.at + step / 2, q.p[key]]; });
    }
    var completed = new Map();
    points.forEach(function (q) { completed.set(q.at, q.p.completed); });
    var common = { start: start, end: end, step: step, startLabel: h.label, hover: hover };
    chart(document.getElementById("throughput-chart"), Object.assign({
      bars: completed,
      lines: [
        { points: middle("failed"), cls: "failed", right: true },
        { points: middle("dead"), cls: "dead", right: true },
      ],
    }, common));
    chart(document.getElementById("backlog-chart"), Object.assign({
      lines: [
        { points: middle("ready"), cls: "ready" },
        { points: middle("running"), cls: "running" },
        { points: middle("oldest_ready_age"), cls: "age", right: true },
      ],
      right: shortSeconds,
    }, common));

    var formats = { oldest_ready_age: seconds, peak_oldest_ready_age: seconds };
    document.querySelectorAll("#history .numbers dd[data-key]").forEach(function (dd) {
      var key = dd.getAttribute("data-key");
      var value = h[key];
      dd.textContent = key === "sampled_at" ? instant(value) : (formats[key] || count)(value);
    });
    var rows = h.points.slice().reverse().filter(function (p) {
      return p.completed || p.failed || p.dead || p.ready !== null;
    }).map(function (p) {
      return el("tr", {}, [
        td(instant(p.at), "nowrap"), td(count(p.completed), "num"), td(count(p.failed), "num"),
        td(count(p.dead), "num"), td(count(p.ready), "num"), td(count(p.scheduled), "num"),
        td(count(p.running), "num"), td(seconds(p.oldest_ready_age), "num"),
      ]);
    });
    if (!rows.length) rows = [empty(8, "Nothing recorded in the last " + h.label + ".")];
    fill(document.getElementById("history-body"), rows);
    document.getElementById("history-empty").hidden = !!(h.completed || h.failed || h.dead || h.sampled_at);
  }

  // Another window or one queue: read after a snapshot, at most as often as a bucket's
  // numbers can change meaningfully (a twelfth of a bucket, every 5 s at the least).
  var lastRead = 0, reading = false;
  function refreshHistory(view) {
    if (!chosen) return;
    if (chosen.isDefault) { renderHistory(view.history); return; }
    var every = Math.max(5000, (chosen.step * 1000) / 12);
    if (reading || Date.now() - lastRead < every) return;
    reading = true;
    lastRead = Date.now();
    var url = base + "/api/history?" + query({ window: chosen.window, queue: chosen.queue });
    fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (body) { if (body && body.data) renderHistory(body.data); })
      .catch(function () { /* the next snapshot tries again */ })
      .then(function () { reading = false; });
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
    renderFleet(view.fleet);
    document.getElementById("as-of").textContent = instant(view.at);
    refreshHistory(view);
    sections(view);
  }

  function start() {
    var seed = document.getElementById("overview-data");
    var history = document.getElementById("history-data");
    if (history) renderHistory(JSON.parse(history.textContent));
    if (seed) sections(JSON.parse(seed.textContent));
    lastRead = Date.now();
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
