// Small SVG charts shared by the dashboard and the simulator's report: lines and step lines over numeric axes.
"use strict";
const PolluxCharts = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const PALETTE = ["#3157d5", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0c8599", "#a61e4d", "#5c940d", "#d9480f"];

  function el(tag, attrs = {}, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Round tick steps (1, 2, 5 x 10^k) covering [lo, hi] with about `count` ticks.
  function ticks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }

  function logTicks(lo, hi) {
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      const v = Math.pow(10, e);
      if (v >= lo && v <= hi) out.push(v);
    }
    return out.length >= 2 ? out : [lo, hi];
  }

  function number(v) {
    const a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (a >= 100 || Number.isInteger(v)) return v.toFixed(0);
    return v.toPrecision(2);
  }

  // series: [{name, points: [[x, y], ...], step, color}]; options: xLabel, yLabel, xFormat, yFormat, logX, yMin,
  // yMax, height, xMarks ([{x, label}]: dashed vertical lines, labelled, the x range stretched to show them). Draws into
  // `container` (emptied first).
  function lineChart(container, series, options = {}) {
    const width = 560, height = options.height || 220, left = 52, right = 12, top = 10, bottom = 38;
    const shown = series.filter((s) => s.points.length);
    const marks = options.xMarks || [];
    const xs = shown.flatMap((s) => s.points.map((p) => p[0]));
    const ys = shown.flatMap((s) => s.points.map((p) => p[1])).filter((y) => y !== null && Number.isFinite(y));
    container.replaceChildren();
    const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
    if (options.title) svg.appendChild(el("title", {}, options.title));
    container.appendChild(svg);
    if (!xs.length || !ys.length) {
      svg.appendChild(el("text", { x: width / 2, y: height / 2, "text-anchor": "middle" }, options.empty || "no data yet"));
      return;
    }
    let x0 = Math.min(...xs, ...marks.map((m) => m.x)), x1 = Math.max(...xs, ...marks.map((m) => m.x));
    if (options.logX) { x0 = Math.max(x0, 1e-9); }
    if (x1 === x0) x1 = x0 + 1;
    let y0 = options.yMin !== undefined ? options.yMin : Math.min(0, ...ys);
    let y1 = options.yMax !== undefined ? options.yMax : Math.max(...ys);
    if (y1 === y0) y1 = y0 + 1;
    y1 = y1 + (y1 - y0) * 0.05;
    const px = options.logX
      ? (x) => left + ((Math.log(Math.max(x, x0)) - Math.log(x0)) / (Math.log(x1) - Math.log(x0))) * (width - left - right)
      : (x) => left + ((x - x0) / (x1 - x0)) * (width - left - right);
    const py = (y) => top + (1 - (y - y0) / (y1 - y0)) * (height - top - bottom);
    const xFormat = options.xFormat || number, yFormat = options.yFormat || number;
    for (const t of ticks(y0, y1, 4)) {
      svg.appendChild(el("line", { class: "grid", x1: left, x2: width - right, y1: py(t), y2: py(t) }));
      svg.appendChild(el("text", { x: left - 6, y: py(t) + 4, "text-anchor": "end" }, yFormat(t)));
    }
    for (const t of options.logX ? logTicks(x0, x1) : ticks(x0, x1, 5)) {
      svg.appendChild(el("line", { class: "axis", x1: px(t), x2: px(t), y1: height - bottom, y2: height - bottom + 4 }));
      svg.appendChild(el("text", { x: px(t), y: height - bottom + 16, "text-anchor": "middle" }, xFormat(t)));
    }
    svg.appendChild(el("line", { class: "axis", x1: left, x2: width - right, y1: height - bottom, y2: height - bottom }));
    svg.appendChild(el("line", { class: "axis", x1: left, x2: left, y1: top, y2: height - bottom }));
    if (options.xLabel) svg.appendChild(el("text", { x: (left + width - right) / 2, y: height - 4, "text-anchor": "middle" }, options.xLabel));
    if (options.yLabel) {
      svg.appendChild(el("text", { x: 12, y: (top + height - bottom) / 2, "text-anchor": "middle",
        transform: `rotate(-90 12 ${(top + height - bottom) / 2})` }, options.yLabel));
    }
    for (const mark of marks) {
      const line = el("line", { class: "mark", x1: px(mark.x), x2: px(mark.x), y1: top, y2: height - bottom,
        stroke: "#6b7385", "stroke-dasharray": "4 3" });
      line.appendChild(el("title", {}, mark.label));
      svg.append(line, el("text", { x: px(mark.x) + 4, y: top + 10, fill: "#6b7385" }, mark.label));
    }
    shown.forEach((s, i) => {
      const color = s.color || PALETTE[i % PALETTE.length];
      let d = "";
      let previous = null;
      for (const [x, y] of s.points) {
        if (y === null || !Number.isFinite(y)) {
          if (previous !== null && s.step) d += `H${px(x).toFixed(1)}`;  // a step holds until the gap begins
          previous = null;
          continue;
        }
        if (previous === null) d += `M${px(x).toFixed(1)},${py(y).toFixed(1)}`;
        else if (s.step) d += `H${px(x).toFixed(1)}V${py(y).toFixed(1)}`;
        else d += `L${px(x).toFixed(1)},${py(y).toFixed(1)}`;
        previous = y;
      }
      const path = el("path", { d, fill: "none", stroke: color, "stroke-width": 1.8 });
      path.appendChild(el("title", {}, s.name));
      svg.appendChild(path);
      if (s.points.length <= 60 && !s.step) {  // few measurements: show each, so a lone first one is seen too
        for (const [x, y] of s.points) {
          if (y !== null && Number.isFinite(y)) svg.appendChild(el("circle", { cx: px(x), cy: py(y), r: 2.5, fill: color }));
        }
      }
    });
    if (shown.length > 1 || options.legend) {
      const legend = document.createElement("div");
      legend.className = "legend";
      shown.forEach((s, i) => {
        const item = document.createElement("span");
        const swatch = document.createElement("span");
        swatch.className = "swatch";
        swatch.style.background = s.color || PALETTE[i % PALETTE.length];
        item.append(swatch, s.name);
        legend.appendChild(item);
      });
      container.appendChild(legend);
    }
  }

  // Fraction of values <= x, as step points (for JCT and fairness distributions).
  function cdf(values) {
    const sorted = values.filter((v) => v !== null && Number.isFinite(v)).sort((a, b) => a - b);
    return sorted.map((v, i) => [v, (i + 1) / sorted.length]);
  }

  // A colour per job from its place in submission order: hues a golden angle apart, so neighbours never look alike;
  // the same in the cluster view, the table and the charts.
  function jobColor(index) {
    return `hsl(${(index * 137.508 + 210) % 360}, 62%, ${index % 2 ? 38 : 48}%)`;
  }

  // Seconds relative to now, as people say them: -45s, -12m, -3.5h.
  function ago(seconds) {
    const a = Math.abs(seconds), sign = seconds < 0 ? "−" : "";
    if (a < 120) return `${sign}${a.toFixed(a < 10 && a % 1 ? 1 : 0)}s`;
    if (a < 7200) return `${sign}${(a / 60).toFixed(0)}m`;
    return `${sign}${(a / 3600).toFixed(1)}h`;
  }

  function hours(seconds) { return seconds / 3600; }

  return { lineChart, cdf, jobColor, ago, number, hours };
})();
