// The overview, live: re-render its tables from each snapshot the server pushes over
// server-sent events (/ui/events), and chart throughput and backlog over time.
// Plain DOM building with textContent, so nothing from the data is ever parsed as HTML.
(function () {
  "use strict";

  var SPAN_MS = 30 * 60 * 1000; // the chart shows the last 30 minutes
  var MAX_POINTS = 720; // backlog samples kept (a tick every 5 s: an hour)
  var throughput = new Map(); // minute (ms) -> plans processed in it
  var backlog = []; // [at (ms), jobs ready + scheduled + running]
  var lastAt = 0;

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

  function renderProviders(providers) {
    var rows = providers.map(function (p) {
      return el("tr", { "data-provider": p.provider }, [
        el("td", { "class": "nowrap" }, [
          el("a", { href: "/ui/runs?provider=" + encodeURIComponent(p.provider) }, [p.provider]),
        ]),
        el("td", { "class": "num" }, [el("a", { href: "/ui/runs/" + p.last_run_id }, ["#" + p.last_run_id])]),
        el("td", {}, [pill(p.last_status)]),
        td(seconds(p.last_age), "num"),
        td(count(p.plans_staged), "num"),
        td(count(p.plans_written), "num"),
        td(count(p.plans_skipped), "num"),
        td(count(p.rows_failed), "num"),
        td(rate(p.throughput), "num"),
        td(instant(p.last_success_at), "nowrap"),
        td(count(p.runs_failed), "num"),
        td(p.last_reason || "", "error"),
      ]);
    });
    if (!rows.length) rows = [empty(12, "No runs yet: start pgenough worker fetch.")];
    fill(document.getElementById("providers-body"), rows);
  }

  function renderQueues(queues) {
    var rows = queues.map(function (q) {
      return el("tr", { "data-queue": q.queue }, [
        el("td", {}, [el("a", { href: "/ui/jobs?queue=" + encodeURIComponent(q.queue) }, [q.queue])]),
        td(count(q.ready), "num"),
        td(count(q.scheduled), "num"),
        td(count(q.running), "num"),
        td(count(q.dead), q.dead ? "num bad" : "num"),
        td(q.ready ? seconds(q.oldest_ready_age) : "—", "num"),
      ]);
    });
    if (!rows.length) rows = [empty(6, "No jobs queued.")];
    fill(document.getElementById("queues-body"), rows);
  }

  function renderFailures(failures) {
    document.querySelectorAll("#failures .card").forEach(function (card) {
      var key = card.getAttribute("data-key");
      var value = failures[key] || 0;
      card.querySelector(".value").textContent = count(value);
      var cls = key === "job_attempts_failed" ? "card-warn" : "card-bad";
      card.classList.toggle(cls, value > 0);
    });
  }

  function record(view) {
    var at = Date.parse(view.at);
    (view.throughput || []).forEach(function (p) { throughput.set(Date.parse(p.minute), p.plans); });
    var jobs = (view.queues || []).reduce(function (n, q) { return n + q.ready + q.scheduled + q.running; }, 0);
    if (at > lastAt) {
      backlog.push([at, jobs]);
      if (backlog.length > MAX_POINTS) backlog.shift();
      lastAt = at;
    }
    throughput.forEach(function (_, minute) {
      if (minute < at - 2 * SPAN_MS) throughput.delete(minute);
    });
  }

  function svg(tag, attrs, text) {
    var node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function drawChart() {
    var chart = document.getElementById("chart");
    if (!chart) return;
    while (chart.firstChild) chart.removeChild(chart.firstChild);
    var W = 560, H = 200, L = 46, R = 46, T = 12, B = 24;
    var end = lastAt || Date.now(), start = end - SPAN_MS;
    var x = function (t) { return L + ((t - start) / SPAN_MS) * (W - L - R); };
    var tpMax = 1, blMax = 1;
    throughput.forEach(function (v, m) { if (m >= start - 60000) tpMax = Math.max(tpMax, v); });
    backlog.forEach(function (p) { if (p[0] >= start) blMax = Math.max(blMax, p[1]); });
    var yTp = function (v) { return H - B - (v / tpMax) * (H - B - T); };
    var yBl = function (v) { return H - B - (v / blMax) * (H - B - T); };

    chart.appendChild(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, "class": "axis" }));
    chart.appendChild(svg("line", { x1: L, y1: T, x2: L, y2: H - B, "class": "axis" }));
    chart.appendChild(svg("line", { x1: W - R, y1: T, x2: W - R, y2: H - B, "class": "axis" }));
    chart.appendChild(svg("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, count(tpMax)));
    chart.appendChild(svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, "0"));
    chart.appendChild(svg("text", { x: W - R + 4, y: T + 8 }, count(blMax)));
    chart.appendChild(svg("text", { x: W - R + 4, y: H - B }, "0"));
    chart.appendChild(svg("text", { x: L, y: H - 6 }, "−30 min"));
    chart.appendChild(svg("text", { x: W - R, y: H - 6, "text-anchor": "end" }, "now"));

    var barW = Math.max(2, ((W - L - R) / 30) - 2);
    throughput.forEach(function (v, minute) {
      if (minute < start - 60000 || minute > end) return;
      var left = Math.max(L, x(minute));
      var bar = svg("rect", { x: left, y: yTp(v), width: barW, height: H - B - yTp(v), "class": "tp" });
      bar.appendChild(svg("title", {}, count(v) + " plans at " + instant(new Date(minute).toISOString())));
      chart.appendChild(bar);
    });
    var points = backlog.filter(function (p) { return p[0] >= start; })
      .map(function (p) { return x(p[0]).toFixed(1) + "," + yBl(p[1]).toFixed(1); });
    if (points.length === 1) points.push((W - R) + "," + points[0].split(",")[1]);
    if (points.length) chart.appendChild(svg("polyline", { points: points.join(" "), "class": "bl" }));
  }

  function render(view) {
    renderProviders(view.providers || []);
    renderQueues(view.queues || []);
    renderFailures(view.failures || {});
    document.getElementById("as-of").textContent = instant(view.at);
    record(view);
    drawChart();
  }

  var seed = document.getElementById("overview-data");
  if (seed) {
    record(JSON.parse(seed.textContent));
    drawChart();
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
  var source = new EventSource("/ui/events");
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
})();
