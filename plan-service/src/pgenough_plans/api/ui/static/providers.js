// The overview's Providers section, live (pgenough's static/live.js calls it with each
// snapshot's sections.providers): the table, the runs and rows failed, and the plans
// processed per minute.
(function () {
  "use strict";

  var throughput = new Map(); // minute (ms) -> plans processed in it

  function render(data, view, d) {
    var f = d.format;
    var rows = (data.providers || []).map(function (p) {
      return d.el("tr", { "data-provider": p.provider }, [
        d.el("td", { "class": "nowrap" }, [
          d.link("/runs?provider=" + encodeURIComponent(p.provider), p.provider),
        ]),
        d.el("td", { "class": "num" }, [d.link("/runs/" + p.last_run_id, "#" + p.last_run_id)]),
        d.el("td", {}, [d.pill(p.last_status)]),
        d.td(f.seconds(p.last_age), "num"),
        d.td(f.count(p.plans_staged), "num"),
        d.td(f.count(p.plans_written), "num"),
        d.td(f.count(p.plans_skipped), "num"),
        d.td(f.count(p.rows_failed), "num"),
        d.td(f.rate(p.throughput), "num"),
        d.td(f.instant(p.last_success_at), "nowrap"),
        d.td(f.count(p.runs_failed), "num"),
        d.td(p.last_reason || "", "error"),
      ]);
    });
    if (!rows.length) rows = [d.empty(12, "No runs yet: start pgenough-plans worker fetch.")];
    d.fill(document.getElementById("providers-body"), rows);

    document.querySelectorAll("#plan-failures .card").forEach(function (card) {
      var value = data[card.getAttribute("data-key")] || 0;
      card.querySelector(".value").textContent = f.count(value);
      card.classList.toggle("card-bad", value > 0);
    });

    var at = Date.parse(view.at);
    (data.throughput || []).forEach(function (p) { throughput.set(Date.parse(p.minute), p.plans); });
    throughput.forEach(function (_, minute) {
      if (minute < at - 2 * d.span) throughput.delete(minute);
    });
    var chart = document.getElementById("plans-chart");
    if (chart) {
      d.chart(chart, {
        end: at,
        bars: throughput,
        barTitle: function (v, minute) {
          return f.count(v) + " plans at " + f.instant(new Date(minute).toISOString());
        },
      });
    }
  }

  window.pgenoughDashboard.section("providers", render);
})();
