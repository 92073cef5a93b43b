// The simulator's report: every chart drawn from the data inlined in the page (it opens from disk, offline).
"use strict";
(() => {
  const data = JSON.parse(document.getElementById("data").textContent);
  const { lineChart, cdf, hours } = PolluxCharts;
  const $ = (id) => document.getElementById(id);
  const make = (tag, text, className) => {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  };

  // The table as `pollux simulate` prints it (cells, order and colours come made from pollux.sim.table and
  // pollux.sim.palette), what each column means under it; every chart's legend follows its order.
  $("meta").textContent = data.title;
  const head = make("tr");
  head.appendChild(make("th", "policy"));
  for (const column of data.columns) {
    const th = make("th", column.label, "num");
    th.title = column.meaning;
    head.appendChild(th);
  }
  $("summary-head").appendChild(head);
  for (const p of data.policies) {
    const tr = make("tr");
    const name = make("td");
    const swatch = make("span", undefined, "swatch");
    swatch.style.background = p.color;
    name.append(swatch, p.policy);
    tr.appendChild(name);
    for (const cell of p.cells) tr.appendChild(make("td", cell, "num"));
    $("summary-body").appendChild(tr);
  }
  $("summary-notes").replaceChildren(...data.columns.flatMap((c) => [make("dt", c.label), make("dd", c.meaning)]));

  // In a run with tenants (experiments): one row per policy and tenant (experiment), below the policies' table
  // (pollux.sim.table.tenant_rows, experiment_rows), the policy named on its first row only.
  const groupTable = (block, key, id, heading) => {
    const section = make("section", undefined, "card wide");
    section.id = id;
    const table = make("table");
    const thead = make("thead");
    const row = make("tr");
    row.append(make("th", "policy"), make("th", key));
    for (const column of block.columns) {
      const th = make("th", column.label, "num");
      th.title = column.meaning;
      row.appendChild(th);
    }
    thead.appendChild(row);
    const tbody = make("tbody");
    block.rows.forEach((r, i) => {
      const tr = make("tr");
      const name = make("td");
      if (i === 0 || block.rows[i - 1].policy !== r.policy) {
        const swatch = make("span", undefined, "swatch");
        swatch.style.background = r.color;
        name.append(swatch, r.policy);
      }
      tr.append(name, make("td", r[key]));
      for (const cell of r.cells) tr.appendChild(make("td", cell, "num"));
      tbody.appendChild(tr);
    });
    table.append(thead, tbody);
    const notes = make("dl", undefined, "notes");
    notes.append(...block.columns.flatMap((c) => [make("dt", c.label), make("dd", c.meaning)]));
    section.append(make("h2", heading), table, notes);
    return section;
  };
  const groups = [];
  if (data.tenants) groups.push(groupTable(data.tenants, "tenant", "tenants", "Tenants: received against entitled GPU-hours"));
  if (data.experiments) groups.push(groupTable(data.experiments, "experiment", "experiments", "Experiments: trials and makespan"));
  if (groups.length) $("summary").closest("section").after(...groups);

  const per = (f) => data.policies.map((p) => ({ name: p.policy, color: p.color, step: true, points: f(p) }));
  lineChart($("jct-cdf"), per((p) => cdf(p.jct_s.map(hours))),
    { logX: true, xLabel: "job completion time (hours, log scale)", yLabel: "fraction of jobs", yMin: 0, yMax: 1, title: "JCT CDF" });
  lineChart($("fairness"), per((p) => cdf(p.fairness)),
    { logX: true, xLabel: "ρ = JCT / JCT alone on a fair share (log scale; > 1: worse off)", yLabel: "fraction of jobs",
      yMin: 0, yMax: 1, title: "finish-time fairness CDF" });
  // Sia's Equation 3: ρ's expectation over the GPU types, each weighted by its share of the GPUs (on one type, ρ).
  lineChart($("sia-fairness"), per((p) => cdf(p.sia_fairness)),
    { logX: true, xLabel: "ρ = Σ_g (type g's share of the GPUs) · ρ on g alone (log scale; > 1: worse off)", yLabel: "fraction of jobs",
      yMin: 0, yMax: 1, xMarks: [{ x: 1, label: "ρ = 1" }], title: "Sia's finish-time fairness CDF" });
  lineChart($("gpus-in-use"), per((p) => p.timeline.map((t) => [hours(t[0]), t[1]])),
    { xLabel: "simulated time (hours)", yLabel: "GPUs in use", yMin: 0, yMax: data.num_gpus, title: "GPUs in use" });
  lineChart($("queued"), per((p) => p.timeline.map((t) => [hours(t[0]), t[2]])),
    { xLabel: "simulated time (hours)", yLabel: "jobs queued", yMin: 0, title: "jobs queued" });

  function drawJob(name) {
    const track = (p, i) => {
      // no batch while it waits: a gap, not a drop to zero
      const points = (p.job_timelines[name] || []).map((t) => [hours(t[0]), i === 2 && t[1] === 0 ? null : t[i]]);
      const finish = p.finish_s[name];
      if (points.length && finish !== undefined && finish !== null) {
        points.push([hours(finish), i === 1 ? 0 : points[points.length - 1][1]]);  // GPUs drop to 0 at the finish
      }
      return points;
    };
    lineChart($("job-gpus"), per((p) => track(p, 1)), { xLabel: "simulated time (hours)", yLabel: "GPUs", yMin: 0, title: `${name}: GPUs` });
    lineChart($("job-batch"), per((p) => track(p, 2)), { xLabel: "simulated time (hours)", yLabel: "total batch size", yMin: 0, title: `${name}: batch size` });
  }
  for (const name of data.job_names) $("job-choice").appendChild(make("option", name));
  $("job-choice").value = data.chosen_job;
  $("job-choice").onchange = (event) => drawJob(event.target.value);
  drawJob(data.chosen_job);
  document.body.dataset.ready = "1";
})();
