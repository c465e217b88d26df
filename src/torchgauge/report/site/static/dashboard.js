// torchgauge dashboard: sorting and filters of the index, plotly charts of the other pages.
// Plain JavaScript, no network. Data comes from the page's <script id="page-data"> JSON;
// strings from results are only ever put into the page as textContent, or given to plotly
// through plotText(), because plotly reads a few HTML tags in its labels.
"use strict";

(function () {
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#d62728"];
  var CONFIG = {displaylogo: false, responsive: true};

  function pageData() {
    var el = document.getElementById("page-data");
    return el ? JSON.parse(el.textContent) : null;
  }

  // Text for plotly labels: plotly turns &lt; back into "<" when it draws, and never sees a tag.
  function plotText(value) {
    return String(value === null || value === undefined ? "" : value)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function fmt(value, digits) {
    return value === null || value === undefined ? "-" : Number(value).toPrecision(digits || 4);
  }

  function makeChart(parent, cls) {
    var div = document.createElement("div");
    div.className = "plot " + (cls || "");
    parent.appendChild(div);
    return div;
  }

  // ---- index: sorting and filtering of the server-rendered table ----

  function initIndex() {
    var table = document.getElementById("runs");
    var tbody = table.tBodies[0];
    var rows = Array.prototype.slice.call(tbody.rows);
    var selects = Array.prototype.slice.call(document.querySelectorAll("select.filter"));
    var text = document.getElementById("filter-text");
    var noisy = document.getElementById("filter-noisy");
    var count = document.getElementById("row-count");
    var noisyCol = columnIndex("noisy");

    function columnIndex(name) {
      var ths = table.tHead.rows[0].cells;
      for (var i = 0; i < ths.length; i++) {
        if (ths[i].textContent === name) { return i; }
      }
      return -1;
    }

    function value(row, col) { return row.cells[col].getAttribute("data-v"); }

    selects.forEach(function (select) {
      var col = Number(select.getAttribute("data-col"));
      var seen = {};
      rows.forEach(function (row) { seen[value(row, col)] = true; });
      Object.keys(seen).sort().forEach(function (v) {
        var option = document.createElement("option");
        option.value = v;
        option.textContent = select.getAttribute("aria-label") + ": " + (v || "(none)");
        select.appendChild(option);
      });
      select.addEventListener("change", applyFilters);
    });

    function applyFilters() {
      var needle = text.value.trim().toLowerCase();
      var shown = 0;
      rows.forEach(function (row) {
        var ok = !needle || value(row, 0).toLowerCase().indexOf(needle) !== -1;
        selects.forEach(function (select) {
          if (ok && select.value !== "" && value(row, Number(select.getAttribute("data-col"))) !== select.value) {
            ok = false;
          }
        });
        if (ok && noisy.checked && value(row, noisyCol) !== "noisy") { ok = false; }
        row.hidden = !ok;
        if (ok) { shown++; }
      });
      count.textContent = shown + " of " + rows.length + " rows";
    }

    text.addEventListener("input", applyFilters);
    noisy.addEventListener("change", applyFilters);

    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.addEventListener("click", function () {
        var col = Number(th.getAttribute("data-col"));
        var numeric = th.getAttribute("data-sort") === "num";
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var sign = ascending ? 1 : -1;
        rows.sort(function (a, b) {
          var x = value(a, col), y = value(b, col);
          if (numeric) {
            var fx = x === "" ? NaN : Number(x), fy = y === "" ? NaN : Number(y);
            if (isNaN(fx) || isNaN(fy)) { return isNaN(fx) - isNaN(fy); }  // blanks last either way
            return sign * (fx - fy);
          }
          return sign * x.localeCompare(y);
        });
        var fragment = document.createDocumentFragment();
        rows.forEach(function (row) { fragment.appendChild(row); });
        tbody.appendChild(fragment);
      });
    });
    applyFilters();
  }

  // ---- model page: one chart per metric ----

  function hoverText(data, label, i) {
    var point = data.points[label][i];
    var env = data.envs[String(point.env)] || {};
    var lines = ["run " + point.run + " (" + point.date.slice(0, 19).replace("T", " ") + ")",
      "status " + point.status,
      "torch " + (env.torch_version || "?") + (env.torch_git_version ? " (" + env.torch_git_version.slice(0, 10) + ")" : ""),
      "host " + (env.hostname || "?") + ", env " + point.env];
    if (env.gpu_name || env.cpu_model) { lines.push(env.gpu_name || env.cpu_model); }
    return lines.map(plotText).join("<br>");
  }

  function seriesTraces(data, series, color) {
    var label = plotText(series.label);
    var traces = [];
    if (series.low.some(function (v) { return v !== null; })) {
      traces.push({x: series.dates, y: series.low, name: label + " interval low", mode: "lines",
        line: {width: 0, color: color}, hoverinfo: "skip", showlegend: false, connectgaps: false});
      traces.push({x: series.dates, y: series.high, name: label + " interval", mode: "lines", fill: "tonexty",
        fillcolor: color + "33", line: {width: 0, color: color}, hoverinfo: "skip", showlegend: false});
    }
    traces.push({x: series.dates, y: series.values, name: label, mode: "lines+markers", line: {color: color, width: 1.5},
      marker: {size: 5}, text: series.values.map(function (_, i) { return hoverText(data, series.label, i); }),
      hovertemplate: "%{y:.4g}<br>%{text}<extra>" + label + "</extra>"});
    traces.push({x: series.dates, y: series.level, name: label + " level", mode: "lines", hoverinfo: "skip",
      line: {color: color, dash: "dash", width: 1}, showlegend: false});
    ["regression", "improvement"].forEach(function (kind) {
      var steps = series.steps.filter(function (s) { return s.kind === kind; });
      if (!steps.length) { return; }
      traces.push({
        x: steps.map(function (s) { return series.dates[s.position]; }),
        y: steps.map(function (s) { return s.after; }),
        name: label + " " + kind, mode: "markers", showlegend: false,
        marker: {symbol: kind === "regression" ? "triangle-up" : "triangle-down", size: 13,
          color: kind === "regression" ? "#d62728" : "#2ca02c", line: {color: "#000", width: 1}},
        text: steps.map(function (s) {
          return plotText(kind + " " + (s.change >= 0 ? "+" : "") + (100 * s.change).toFixed(1) + "% at run " + s.run);
        }),
        hovertemplate: "%{text}<extra></extra>"
      });
    });
    return traces;
  }

  // Links to a run's environment (#env-N) open the collapsed table that holds it.
  function revealTarget() {
    var target = location.hash ? document.getElementById(location.hash.slice(1)) : null;
    var details = target ? target.closest("details") : null;
    if (details) {
      details.open = true;
      target.scrollIntoView();
    }
  }

  function initModel() {
    var data = pageData();
    window.addEventListener("hashchange", revealTarget);
    revealTarget();
    Array.prototype.forEach.call(document.querySelectorAll("div.chart[data-metric]"), function (div) {
      var metric = data.metrics[div.getAttribute("data-metric")];
      var traces = [];
      metric.series.forEach(function (series, i) {
        traces = traces.concat(seriesTraces(data, series, PALETTE[i % PALETTE.length]));
      });
      Plotly.newPlot(div, traces, {
        margin: {t: 10, r: 10}, height: 360, hovermode: "closest", legend: {orientation: "h"},
        xaxis: {type: "date"}, yaxis: {title: {text: plotText(metric.unit)}, rangemode: "tozero"}
      }, CONFIG);
    });
  }

  // ---- figures page ----

  // Bars of ratios on a log axis, drawn from 1 so that < 1 points down and > 1 up.
  function ratioBars(div, categories, series, title, ytitle) {
    var traces = series.map(function (s, i) {
      return {type: "bar", name: plotText(s.name), x: categories.map(plotText), base: 1,
        y: s.values.map(function (v) { return v === null || v <= 0 ? null : v - 1; }),
        customdata: s.values, hovertemplate: "%{x}: %{customdata:.3f}<extra>" + plotText(s.name) + "</extra>",
        marker: {color: PALETTE[i % PALETTE.length]}};
    });
    Plotly.newPlot(div, traces, {
      title: {text: plotText(title)}, barmode: "group", height: 420, margin: {b: 140},
      yaxis: {type: "log", title: {text: plotText(ytitle)}}, xaxis: {tickangle: -60, automargin: true},
      shapes: [{type: "line", xref: "paper", x0: 0, x1: 1, y0: 1, y1: 1, line: {color: "#000", dash: "dash", width: 1}}]
    }, CONFIG);
  }

  function modes(rows) {
    var out = [];
    rows.forEach(function (r) { if (out.indexOf(r.mode) === -1) { out.push(r.mode); } });
    return out;
  }

  // Bar labels: the model, plus the configuration fields that differ between the rows, so that
  // two rows of one model (say eager and inductor on two devices) never share a bar slot.
  function rowLabels(rows, fields) {
    var varying = fields.filter(function (f) {
      return rows.some(function (r) { return r[f] !== rows[0][f]; });
    });
    return rows.map(function (r) {
      return r.model + (varying.length ? " [" + varying.map(function (f) { return r[f]; }).join("/") + "]" : "");
    });
  }

  function initFigures() {
    var data = pageData();
    var breakdown = document.querySelector('div.chart[data-figure="breakdown"]');
    if (breakdown) {
      data.breakdown.bars.forEach(function (panel) {
        var traces = panel.components.map(function (c, i) {
          return {type: "bar", orientation: "h", name: plotText(c.name), y: panel.models.map(plotText), x: c.values,
            marker: {color: PALETTE[i % PALETTE.length]}, hovertemplate: "%{y}: %{x:.1f}%<extra>" + plotText(c.name) + "</extra>"};
        });
        Plotly.newPlot(makeChart(breakdown), traces, {
          title: {text: plotText((panel.kind === "cuda" ? "GPU" : "CPU") + " time breakdown, " + panel.config + ", " + panel.mode)},
          barmode: "stack", height: 140 + 22 * panel.models.length, xaxis: {range: [0, 100], title: {text: "% of profiled time"}},
          yaxis: {autorange: "reversed", automargin: true}, margin: {l: 10}
        }, CONFIG);
      });
    }
    Array.prototype.forEach.call(document.querySelectorAll('div.chart[data-figure="backends"]'), function (div) {
      var cmp = data.backends[Number(div.getAttribute("data-index"))];
      modes(cmp.rows).forEach(function (mode) {
        var rows = cmp.rows.filter(function (r) { return r.mode === mode; });
        var series = cmp.metrics.map(function (m) {
          var g = (cmp.geomeans[mode] || {})[m] || {};
          return {name: cmp.titles[m] + " (geomean " + fmt(g.geomean, 3) + ")",
            values: rows.map(function (r) { return r.ratios[m]; })};
        });
        var names = rowLabels(rows, ["device", "precision", "batch_size"]).map(function (name, i) {
          return name + (rows[i].accuracy === "fail_accuracy" ? " (fail_accuracy)" : "");
        });
        ratioBars(makeChart(div), names, series, mode + ": " + cmp.candidate + " / " + cmp.baseline + " (< 1: " +
          cmp.candidate + " better)", cmp.candidate + " / " + cmp.baseline);
      });
    });
    Array.prototype.forEach.call(document.querySelectorAll('div.chart[data-figure="devices"]'), function (div) {
      var cmp = data.devices[Number(div.getAttribute("data-index"))];
      modes(cmp.rows).forEach(function (mode) {
        var rows = cmp.rows.filter(function (r) { return r.mode === mode; });
        var g = cmp.geomeans[mode] || {};
        ratioBars(makeChart(div), rowLabels(rows, ["precision", "backend", "batch_size"]),
          [{name: "time A / B (geomean " + fmt(g.geomean, 3) + ")", values: rows.map(function (r) { return r.ratio; })}],
          mode + ": time A / B (< 1: A faster)", "time A / B");
      });
    });
    var domains = document.querySelector('div.chart[data-figure="coverage-domains"]');
    if (domains) {
      var names = Object.keys(data.coverage.per_domain);
      Plotly.newPlot(domains, ["apis", "ops"].map(function (kind, i) {
        return {type: "bar", name: kind === "apis" ? "Python APIs" : "ATen operators", x: names.map(plotText),
          y: names.map(function (d) { return data.coverage.per_domain[d][kind]; }), marker: {color: PALETTE[i]}};
      }), {title: {text: "PyTorch surface covered, by domain"}, barmode: "group", height: 380,
        yaxis: {title: {text: "distinct items reached"}}}, CONFIG);
    }
    var greedy = document.querySelector('div.chart[data-figure="coverage-greedy"]');
    if (greedy) {
      var order = data.coverage.greedy;
      Plotly.newPlot(greedy, [{type: "scatter", mode: "lines+markers", name: "cumulative APIs",
        x: order.map(function (_, i) { return i + 1; }), y: order.map(function (g) { return g.cumulative; }),
        text: order.map(function (g) { return plotText(g.model + " (+" + g.new + ")"); }),
        hovertemplate: "%{x} models: %{y} APIs<br>%{text}<extra></extra>"}],
      {title: {text: "APIs covered by the first N models (greedy order)"}, height: 360,
        xaxis: {title: {text: "models"}, dtick: 1}, yaxis: {title: {text: "distinct APIs"}}}, CONFIG);
    }
  }

  var init = {index: initIndex, model: initModel, figures: initFigures}[document.body.getAttribute("data-page")];
  if (init) { init(); }
  // "dashboard-ready": the page is usable (the size benchmark and the browser tests wait for it).
  performance.mark("dashboard-ready");
  document.body.setAttribute("data-ready", "1");
}());
