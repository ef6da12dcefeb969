window.pgenoughDashboard.section("orders", function (data, view, d) {
  document.getElementById("open-orders").textContent = d.format.count(data.open);
});
