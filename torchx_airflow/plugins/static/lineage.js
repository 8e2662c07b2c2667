// Hover a run: its edges and neighbours stay bright, the rest fades. No library, no network.
(function () {
  "use strict";
  var svg = document.querySelector("svg.lineage");
  if (!svg) return;
  var edges = Array.prototype.slice.call(svg.querySelectorAll(".edge"));
  var runs = {};
  Array.prototype.forEach.call(svg.querySelectorAll(".run"), function (g) { runs[g.dataset.run] = g; });
  function clear() {
    svg.classList.remove("focus");
    Array.prototype.forEach.call(svg.querySelectorAll(".near"), function (el) { el.classList.remove("near"); });
  }
  function focus(runId) {
    clear();
    svg.classList.add("focus");
    runs[runId].classList.add("near");
    edges.forEach(function (edge) {
      var other = edge.dataset.source === runId ? edge.dataset.target : edge.dataset.target === runId ? edge.dataset.source : null;
      if (other === null) return;
      edge.classList.add("near");
      if (runs[other]) runs[other].classList.add("near");
    });
  }
  Object.keys(runs).forEach(function (runId) {
    runs[runId].addEventListener("mouseenter", function () { focus(runId); });
    runs[runId].addEventListener("mouseleave", clear);
  });
  var selected = svg.querySelector(".run.selected");
  if (selected && selected.scrollIntoView) selected.scrollIntoView({ block: "nearest", inline: "nearest" });
})();
