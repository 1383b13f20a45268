// infersight dashboard: filters submit on change, legend items toggle their line,
// and the page reloads itself every `data-refresh` seconds while it is visible.
"use strict";

function submitFilters(event) {
  const form = document.getElementById("filters");
  if (!form) return;
  if (event && event.target && event.target.id === "range") {
    // A preset range replaces a custom one.
    for (const id of ["start", "end"]) {
      const input = document.getElementById(id);
      if (input) input.value = "";
    }
  }
  // Empty values would only clutter the URL.
  for (const element of Array.from(form.elements)) {
    if (element.name && !element.value) element.disabled = true;
  }
  form.submit();
}

function toggleSeries(button) {
  const index = button.dataset.series;
  const card = button.closest(".card") || document;
  const svg = card.querySelector("svg.chart");
  if (!svg) return;
  for (const group of svg.querySelectorAll(`g.series[data-series="${index}"]`)) {
    group.classList.toggle("hidden");
  }
  button.classList.toggle("off");
}

function scheduleRefresh() {
  const seconds = Number(document.body.dataset.refresh || 0);
  if (!seconds) return;
  let timer = null;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (document.visibilityState === "visible") window.location.reload();
      else arm();
    }, seconds * 1000);
  };
  document.addEventListener("visibilitychange", arm);
  arm();
}

document.addEventListener("DOMContentLoaded", () => {
  for (const select of document.querySelectorAll("#filters select")) {
    select.addEventListener("change", submitFilters);
  }
  for (const button of document.querySelectorAll(".legend-item")) {
    button.addEventListener("click", () => toggleSeries(button));
  }
  scheduleRefresh();
});
