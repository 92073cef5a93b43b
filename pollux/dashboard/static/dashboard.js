// The live dashboard: polls the service's API (same origin, session cookie) and redraws without reloading.
"use strict";
(() => {
  const POLL_MS = Number(document.body.dataset.pollMs || 1000);
  const { lineChart, ago } = PolluxCharts;
  const $ = (id) => document.getElementById(id);
  // sorted by status at first: running, then pending (both oldest first), then the rest, newest first
  const state = { sort: { key: "status", dir: 1 }, filter: "all", data: null, job: null, order: {} };
  const jobColor = (name) => PolluxCharts.jobColor(state.order[name] ?? 0);

  function make(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }
  const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour12: false });
  function age(seconds) {
    if (seconds < 120) return `${seconds.toFixed(0)}s`;
    if (seconds < 7200) return `${(seconds / 60).toFixed(0)}m`;
    return `${(seconds / 3600).toFixed(1)}h`;
  }
  const fixed = (v, digits) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));
  const since = (now) => (t) => t - now;  // x axes: seconds relative to now
  const TIME_AXIS = { xLabel: "time (0 = now)", xFormat: ago };

  async function getJson(path) {
    const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
    if (response.status === 401) { window.location.replace("/ui/login"); throw new Error("logged out"); }
    if (!response.ok) throw new Error(`${path}: ${response.status}`);
    return response.json();
  }

  // -- cluster view: one row of GPU cells per node, coloured by the job holding each GPU ----------------------
  // A held cell shows its job's number in the legend below (names do not fit in a cell, and share prefixes);
  // its tooltip and the legend name the job, and pointing at either highlights all of that job's GPUs.
  // A tenant's session sees its own jobs by name, and the GPUs other tenants hold as grey cells (no names).
  const OTHERS = "";
  function drawCluster(data) {
    const holders = data.cluster.nodes.map(() => []);
    for (const job of data.jobs) {
      (job.allocation || []).forEach((count, node) => { for (let i = 0; i < count; i++) holders[node].push(job.name); });
    }
    (data.held_by_others || []).forEach((count, node) => { for (let i = 0; i < count; i++) holders[node].push(OTHERS); });
    const key = {};
    for (const name of holders.flat()) if (name !== OTHERS) key[name] ??= Object.keys(key).length + 1;
    const rows = data.cluster.nodes.map((node, n) => {
      const row = make("div", null, "node");
      row.dataset.node = n;
      const label = data.cluster.typed ? `node ${n} · ${node.type}` : `node ${n}`;
      row.appendChild(make("span", `${label}  ${holders[n].length}/${node.gpus}`, "label"));
      const cells = make("div", null, "gpus");
      for (let g = 0; g < node.gpus; g++) {
        const name = holders[n][g];
        const cell = make("div", null, name ? "gpu held" : name === OTHERS ? "gpu other" : "gpu");
        if (name === OTHERS) {
          cell.title = `held by another tenant (node ${n}, GPU ${g})`;
        } else if (name) {
          cell.style.background = jobColor(name);
          cell.title = `${name} (node ${n}, GPU ${g})`;
          cell.dataset.job = name;
          cell.textContent = key[name];
          cell.onclick = () => openJob(name);
          highlightOn(cell, name);
        } else {
          cell.title = `free (node ${n}, GPU ${g})`;
        }
        cells.appendChild(cell);
      }
      row.appendChild(cells);
      return row;
    });
    $("cluster").replaceChildren(...rows);
    $("cluster").classList.remove("focus");  // new cells: a highlight comes back when the pointer moves
    const used = holders.reduce((sum, h) => sum + h.length, 0);
    $("cluster-summary").textContent = `${used} of ${data.cluster.num_gpus} GPUs held, ${data.cluster.num_gpus - used} free`;
    const gpusOf = Object.fromEntries(data.jobs.map((j) => [j.name, j.gpus]));
    const legend = Object.entries(key).map(([name, number]) => {
      const item = make("span", null, "link");
      const swatch = make("span", number, "swatch key");
      swatch.style.background = jobColor(name);
      item.append(swatch, `${name} (${gpusOf[name]} GPU${gpusOf[name] === 1 ? "" : "s"})`);
      item.onclick = () => openJob(name);
      highlightOn(item, name);
      return item;
    });
    $("cluster-legend").replaceChildren(...legend);
  }

  function highlightOn(node, name) {
    node.onmouseenter = () => {
      $("cluster").classList.add("focus");
      for (const cell of $("cluster").querySelectorAll(".gpu.held")) cell.classList.toggle("hl", cell.dataset.job === name);
    };
    node.onmouseleave = () => $("cluster").classList.remove("focus");
  }

  // -- tenants: every tenant's GPUs per type against its guarantee (a row each: readable at 20 tenants) -----------
  function quotaCell(q, capacity) {
    const td = make("td");
    const bar = make("span", null, "quota");
    const part = (cls, from, to) => {
      const node = make("span", null, cls);
      node.style.left = `${(100 * from) / capacity}%`;
      node.style.width = `${(100 * Math.max(to - from, 0)) / capacity}%`;
      return node;
    };
    bar.append(part("own", 0, Math.min(q.held, q.guaranteed)), part("borrowed", q.guaranteed, q.held));
    const tick = make("span", null, "tick");
    tick.style.left = `calc(${(100 * q.guaranteed) / capacity}% - 1px)`;
    bar.appendChild(tick);
    bar.title = `held ${q.held}, guaranteed ${q.guaranteed}, budget ${q.budget}, entitled ${q.entitled}, demand ${q.demand}`;
    td.append(bar, `${q.held} / ${q.guaranteed} · budget ${q.budget}`);
    return td;
  }

  function drawTenants(data) {
    const usage = data.tenants || { tenants: [] };
    $("tenants-card").hidden = !usage.tenants.length;
    if (!usage.tenants.length) return;
    const types = usage.gpu_types;
    const head = make("tr");
    head.append(make("th", "tenant"), make("th", "jobs running · pending", "num"));
    for (const type of types) head.appendChild(make("th", `${type}: held / guaranteed · budget`));
    const rows = usage.tenants.map((tenant) => {
      const tr = make("tr");
      tr.dataset.tenant = tenant.name;
      tr.append(make("td", tenant.name), make("td", `${tenant.jobs_running} · ${tenant.jobs_pending}`, "num"));
      for (const type of types) tr.appendChild(quotaCell(tenant.types[type], Math.max(usage.capacity[type], 1)));
      return tr;
    });
    $("tenants-head").replaceChildren(head);
    $("tenants-body").replaceChildren(...rows);
    const borrowing = usage.tenants.filter((t) => types.some((type) => t.types[type].held > t.types[type].guaranteed));
    $("tenants-summary").textContent = `${usage.tenants.length} tenant(s), ${borrowing.length} borrowing`;
  }

  // -- jobs table ------------------------------------------------------------------------------------------------
  const COLUMNS = [
    ["name", "job"], ["status", "status"], ["gpus", "GPUs", true], ["placement", "placement"],
    ["local_bsz", "m", true], ["accum_steps", "s", true], ["batch_size", "M", true], ["goodput", "goodput", true],
    ["efficiency", "efficiency", true], ["restarts", "restarts", true], ["age_s", "age", true], ["reason", "why it waits"],
  ];

  function note(job) {
    if (job.reason) return job.reason;
    const lines = (job.last_error || "").split("\n").filter((l) => l.trim());
    return lines.length > 1 ? `${lines[0]}: ${lines[lines.length - 1]}` : lines[0] || "";
  }

  function cell(job, key) {
    switch (key) {
      case "name": {
        const td = make("td");
        const swatch = make("span", null, "swatch");
        swatch.style.background = jobColor(job.name);
        td.append(swatch, job.name);
        return td;
      }
      case "status": { const td = make("td"); td.appendChild(make("span", job.status, `status ${job.status}`)); return td; }
      case "placement": return make("td", job.placement.join("x") || "–");
      case "experiment": return make("td", job.experiment || "–");
      case "goodput": return make("td", fixed(job.goodput, 1), "num");
      case "efficiency": return make("td", fixed(job.efficiency, 2), "num");
      case "age_s": return make("td", age(job.age_s), "num");
      case "reason": return make("td", note(job), "note");
      default: return make("td", job[key] === null || job[key] === undefined ? "–" : job[key], "num");
    }
  }

  const STATUS_ORDER = ["running", "pending", "completed", "failed", "cancelled"];  // pollux.runtime.status
  const group = (job) => (job.status === "running" ? 0 : job.status === "pending" ? 1 : 2);

  // The status column sorts as a cluster is read: what runs, what waits (both in submission order, the queue's),
  // then what ended, the latest first.
  function byStatus(a, b) {
    return group(a) - group(b) || (group(a) < 2 ? a.submitted_at - b.submitted_at : b.updated_at - a.updated_at)
      || (a.name < b.name ? -1 : 1);
  }

  function byColumn(key) {
    const value = (job) => (key === "placement" ? job.placement.join("x") : job[key]);
    return (a, b) => {
      const x = value(a), y = value(b);
      if (x === y) return a.name < b.name ? -1 : 1;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return x < y ? -1 : 1;
    };
  }

  // The status filter: "all" or one status, a button each with its count (one that is chosen stays while empty).
  function drawFilter(data) {
    const counts = { all: data.jobs.length };
    for (const job of data.jobs) counts[job.status] = (counts[job.status] || 0) + 1;
    const shown = ["all", ...STATUS_ORDER].filter((s) => s === "all" || counts[s] || s === state.filter);
    const buttons = shown.map((status) => {
      const button = make("button", `${status} ${counts[status] || 0}`, status === state.filter ? "chip on" : "chip");
      button.type = "button";
      button.dataset.status = status;
      button.setAttribute("aria-pressed", String(status === state.filter));
      button.onclick = () => { state.filter = status; drawJobs(state.data); };
      return button;
    });
    $("jobs-filter").replaceChildren(...buttons);
  }

  // Where a job is a trial of an experiment (`pollux tune`), an experiment column: sorting by it groups the trials.
  function columnsOf(data) {
    return data.jobs.some((job) => job.experiment) ? [COLUMNS[0], ["experiment", "experiment"], ...COLUMNS.slice(1)] : COLUMNS;
  }

  function drawJobs(data) {
    const { key, dir } = state.sort;
    const columns = columnsOf(data);
    const compare = key === "status" ? byStatus : byColumn(key);
    const jobs = data.jobs.filter((job) => state.filter === "all" || job.status === state.filter)
      .sort((a, b) => compare(a, b) * dir);
    const head = make("tr");
    for (const [k, label, numeric] of columns) {
      const th = make("th", label, `sortable${numeric ? " num" : ""}${k === key ? " sorted" + (dir > 0 ? " up" : "") : ""}`);
      th.dataset.key = k;
      th.onclick = () => { state.sort = { key: k, dir: k === key ? -dir : 1 }; drawJobs(state.data); };
      head.appendChild(th);
    }
    const rows = jobs.map((job) => {
      const tr = make("tr", null, "link");
      tr.dataset.job = job.name;
      tr.dataset.status = job.status;
      for (const [k] of columns) tr.appendChild(cell(job, k));
      tr.onclick = () => openJob(job.name);
      return tr;
    });
    if (!rows.length) {
      const tr = make("tr");
      const td = make("td", data.jobs.length ? `no ${state.filter} jobs` : "no jobs yet", "muted");
      td.colSpan = columns.length;
      tr.appendChild(td);
      rows.push(tr);
    }
    $("jobs-head").replaceChildren(head);
    $("jobs-body").replaceChildren(...rows);
    drawFilter(data);
  }

  // -- tenants (a tenant's session without a tenants file): every tenant's unfinished jobs and GPUs held, as counts --
  function drawTenantCounts(data) {
    const shown = data.tenant_counts && !(data.tenants && data.tenants.tenants.length);
    $("tenant-counts-card").hidden = !shown;
    if (!shown) return;
    const rows = Object.entries(data.tenant_counts).map(([name, t]) => {
      const row = make("tr", null, name === data.tenant ? "own" : "");
      const types = Object.entries(t.gpus_by_type).map(([type, n]) => `${n} ${type}`).join(", ");
      row.append(make("td", name), make("td", t.running, "num"), make("td", t.pending, "num"),
        make("td", t.gpus, "num"), make("td", types || "–"));
      return row;
    });
    $("tenant-counts").replaceChildren(...rows);
  }

  // -- scheduler view -------------------------------------------------------------------------------------------
  function drawScheduler(data) {
    const lines = data.decisions.flatMap((round) => round.decisions.map((d) => {
      const line = make("div", null, "decision");
      line.append(make("span", clock(round.at), "at"), make("span", d.kind, `kind ${d.kind}`));
      const what = d.kind === "start" ? `${d.job} on ${d.gpus_to} GPU(s)`
        : d.kind === "stop" ? `${d.job} (held ${d.gpus_from})` : `${d.job} ${d.gpus_from} → ${d.gpus_to} GPU(s)`;
      line.append(what);
      return line;
    }));
    $("decisions").replaceChildren(...(lines.length ? lines : [make("div", "no decisions yet", "muted")]));
    const points = data.utilization;
    const x = since(data.now);
    lineChart($("utilization"), [
      { name: "GPUs in use", points: points.map((p) => [x(p[0]), p[1]]), step: true },
      { name: "jobs running", points: points.map((p) => [x(p[0]), p[2]]), step: true },
      { name: "jobs pending", points: points.map((p) => [x(p[0]), p[3]]), step: true },
    ], { ...TIME_AXIS, yLabel: "count", title: "cluster utilization over time" });
  }

  // -- job page ---------------------------------------------------------------------------------------------------
  function openJob(name) { window.location.hash = `job/${encodeURIComponent(name)}`; }

  // What is known of a job, in a line: a job that never reported (failed at launch, pending) has no batch or goodput.
  function facts(job) {
    const known = (v) => v !== null && v !== undefined;
    return [
      `${job.gpus} GPU(s)${job.placement.length ? " on " + job.placement.join("x") : ""}`,
      known(job.batch_size) && `batch M=${job.batch_size} (m=${job.local_bsz}, s=${job.accum_steps})`,
      known(job.goodput) && `goodput ${fixed(job.goodput, 1)}`,
      known(job.efficiency) && `efficiency ${fixed(job.efficiency, 2)}`,
      `${job.restarts} restart(s)`, `age ${age(job.age_s)}`, note(job),
    ].filter(Boolean);
  }

  async function drawJob(name) {
    const detail = await getJson(`/v1/dashboard/jobs/${encodeURIComponent(name)}`);
    const job = detail.job, now = state.data ? state.data.now : job.submitted_at + job.age_s;
    const x = since(now);
    $("job-title").textContent = job.name;
    $("job-summary").replaceChildren(make("span", job.status, `status ${job.status}`), ` ${facts(job).join(" · ")}`);
    const s = detail.samples;
    lineChart($("job-goodput"), [{ name: "goodput", points: s.map((p) => [x(p[0]), p[5]]) }],
      { ...TIME_AXIS, yLabel: "goodput", title: "goodput", empty: "no goodput model yet" });
    lineChart($("job-efficiency"), [{ name: "statistical efficiency", points: s.map((p) => [x(p[0]), p[6]]) }],
      { ...TIME_AXIS, yLabel: "efficiency", yMin: 0, yMax: 1, title: "statistical efficiency",
        empty: "no gradient statistics yet" });
    lineChart($("job-batch"), [
      { name: "M (total)", points: s.map((p) => [x(p[0]), p[4]]), step: true },
      { name: "m (per GPU)", points: s.map((p) => [x(p[0]), p[2]]), step: true },
    ], { ...TIME_AXIS, yLabel: "batch size", title: "batch size", empty: "no report yet" });
    const gpus = detail.allocations.map((p) => [x(p[0]), p[1]]);
    if (gpus.length) gpus.push([0, gpus[gpus.length - 1][1]]);
    lineChart($("job-gpus"), [{ name: "GPUs", points: gpus, step: true, color: jobColor(job.name) }],
      { ...TIME_AXIS, yLabel: "GPUs", yMin: 0, title: "GPU count", empty: "never ran yet" });
    const rows = detail.history.map((h) => {
      const tr = make("tr");
      tr.append(make("td", clock(h.at)), make("td", h.status), make("td", h.reason, "note"));
      return tr;
    });
    $("job-history").replaceChildren(...rows);
    const log = $("job-log");
    const following = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;  // at the end: keep following it
    log.textContent = detail.log_tail;
    if (following) log.scrollTop = log.scrollHeight;
  }

  // -- loop -----------------------------------------------------------------------------------------------------------
  function route() {
    const match = window.location.hash.match(/^#job\/(.+)$/);
    state.job = match ? decodeURIComponent(match[1]) : null;
    $("overview").hidden = state.job !== null;
    $("jobpage").hidden = state.job === null;
  }

  async function refresh() {
    try {
      const data = await getJson("/v1/dashboard");
      state.data = data;
      data.jobs.forEach((job, i) => { state.order[job.name] = i; });  // rows come in submission order
      $("meta").textContent = `${data.tenant ? `tenant ${data.tenant} · ` : ""}policy ${data.policy} · ${data.backend} backend · ${data.jobs.length} job(s) · round ${data.rounds_run} · updated ${clock(data.now)}`;
      if (state.job === null) {
        drawCluster(data);
        drawTenants(data);
        drawTenantCounts(data);
        drawJobs(data);
        drawScheduler(data);
      } else {
        await drawJob(state.job);
      }
      if (!document.body.dataset.ready) { performance.mark("pollux-data-drawn"); document.body.dataset.ready = "1"; }
      $("error").textContent = "";
    } catch (error) {
      $("error").textContent = `update failed: ${error.message}`;
    }
    window.setTimeout(refresh, POLL_MS);
  }

  window.addEventListener("hashchange", () => { route(); if (state.data && state.job === null) { drawCluster(state.data); drawTenants(state.data); drawTenantCounts(state.data); drawJobs(state.data); drawScheduler(state.data); } else if (state.job) drawJob(state.job).catch(() => {}); });
  $("back").onclick = () => { window.location.hash = ""; };
  route();
  refresh();
})();
