// robo-prm episode viewer. Every text is set with textContent: reasons and descriptions are model output.
"use strict";
(function () {
  const EPISODES = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const W = 600, H = 130, X0 = 26, X1 = 592, YT = 10, YB = 100;
  let ep = null, t = 0, timer = null;

  function el(tag, attrs, text) {
    const e = document.createElementNS(tag.startsWith("svg:") ? SVG : "http://www.w3.org/1999/xhtml", tag.replace("svg:", ""));
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const fmt = (x, d = 3) => (x === null || x === undefined ? "-" : (x >= 0 ? "+" : "") + x.toFixed(d));
  const xOf = (i) => X0 + (X1 - X0) * i / Math.max(ep.view.length - 1, 1);
  const yOf = (p) => YB - (YB - YT) * p;

  function drawCurve() {
    const svg = $("curve");
    svg.replaceChildren();
    for (const p of [0, 0.5, 1]) svg.append(el("svg:line", {x1: X0, x2: X1, y1: yOf(p), y2: yOf(p), stroke: "#333"}));
    svg.append(el("svg:text", {x: 4, y: yOf(1) + 4, fill: "#888", "font-size": 10}, "1"));
    svg.append(el("svg:text", {x: 4, y: yOf(0) + 4, fill: "#888", "font-size": 10}, "0"));
    let pts = [];
    ep.view.forEach((v, i) => {
      if (v.progress !== null) pts.push(`${xOf(i).toFixed(1)},${yOf(v.progress).toFixed(1)}`);
      if (v.judged_here) svg.append(el("svg:circle", {cx: xOf(i), cy: yOf(v.progress), r: 2, fill: "#50a0f0"}));
      if (v.judged_here && v.hazards.some((h) => h.p >= 0.5))
        svg.append(el("svg:line", {x1: xOf(i), x2: xOf(i), y1: YB + 6, y2: YB + 13, stroke: "#eb463c", "stroke-width": 2}));
      if (v.sim_hazards.length)
        svg.append(el("svg:line", {x1: xOf(i), x2: xOf(i), y1: YB + 16, y2: YB + 23, stroke: "#f0a032", "stroke-width": 2}));
    });
    svg.append(el("svg:polyline", {points: pts.join(" "), fill: "none", stroke: "#50a0f0", "stroke-width": 2}));
    const s = ep.view.findIndex((v) => v.success);
    if (s >= 0) svg.append(el("svg:line", {x1: xOf(s), x2: xOf(s), y1: YT, y2: YB, stroke: "#46c85a"}));
    svg.append(el("svg:line", {id: "cursor", x1: 0, x2: 0, y1: YT - 6, y2: YB + 2, stroke: "#fff"}));
  }

  function row(table, cells, cls) {
    const tr = el("tr", cls ? {class: cls} : {});
    for (const c of cells) tr.append(el("td", {}, c));
    table.append(tr);
  }

  function showPanel(v) {
    $("score").textContent = v.score === null ? "score -/10" : `score ${v.score.toFixed(1)}/10`;
    $("bar").style.width = v.progress === null ? "0" : `${(100 * v.progress).toFixed(1)}%`;
    let note = v.score === null ? "not judged yet" : `conf ${v.confidence.toFixed(2)} · ${v.backend}` + (v.fallback ? " (rules fallback)" : "");
    if (v.unbanded !== null && v.unbanded !== undefined && Math.abs(v.unbanded - v.progress) > 1e-6) {
        note += ` (LLM ${(1 + 9 * v.unbanded).toFixed(1)}, held to its stage)`;  // milestone_band moved it
    }
    if (v.judged_at !== null && v.judged_at !== v.t) note += ` · held from step ${v.judged_at}`;
    $("judgeNote").textContent = note;
    const held = v.reason !== null && v.reason_at !== v.t;
    $("reasonHead").textContent = "reason" + (held ? ` (held from step ${v.reason_at})` : "");
    $("reason").textContent = v.reason === null ? "-" : v.reason;
    $("reason").className = held ? "held" : "";
    const hz = $("hazards");
    hz.replaceChildren();
    row(hz, ["", "judge p", "simulator"], "dim");
    const names = new Set([...v.hazards.map((h) => h.name), ...v.sim_hazards, ...Object.keys(v.sim_checks)]);
    if (!names.size) row(hz, ["none", "", ""], "dim");
    for (const n of names) {
      const h = v.hazards.find((x) => x.name === n);
      const sim = v.sim_hazards.includes(n) || v.sim_checks[n] === true;
      row(hz, [n, h ? h.p.toFixed(2) : "-", sim ? "holds" : (n in v.sim_checks ? "no" : "")], (h && h.p >= 0.5) || sim ? "red" : "");
    }
    const ms = Object.entries(v.milestones);
    $("milestones").textContent = ms.length ? ms.map(([k, ok]) => `${ok ? "✔" : "✘"} ${k}`).join("   ") : "none recorded";
    const tt = $("terms");
    tt.replaceChildren();
    for (const [k, x] of Object.entries(v.terms)) {
      if (!k.startsWith("term/")) continue;
      const w = v.terms["weight/" + k.slice(5)];
      row(tt, [k.slice(5), fmt(x), w === undefined ? "" : `× ${w.toFixed(2)}`]);
    }
    if (v.env_reward !== null) row(tt, ["env rew", fmt(v.env_reward), ""]);
    if ("total" in v.terms) row(tt, ["total", fmt(v.terms.total), ""], "total");
    $("description").textContent = v.description || "-";
  }

  function show(i) {
    t = Math.max(0, Math.min(ep.view.length - 1, i));
    const v = ep.view[t];
    $("frame").src = ep.frames[t];
    $("scrub").value = t;
    $("stepLabel").textContent = `step ${t}/${ep.view.length - 1}` + (t === 0 ? " (reset)" : "");
    $("banner").hidden = !v.success;
    const c = $("cursor");
    c.setAttribute("x1", xOf(t)); c.setAttribute("x2", xOf(t));
    showPanel(v);
  }

  function pause() { if (timer) clearInterval(timer); timer = null; $("play").textContent = "play"; }
  function play() {
    if (t >= ep.view.length - 1) show(0);
    timer = setInterval(() => (t >= ep.view.length - 1 ? pause() : show(t + 1)), 1000 / Number($("speed").value));
    $("play").textContent = "pause";
  }

  function load(k) {
    pause();
    ep = EPISODES[k];
    const m = ep.meta;
    $("title").textContent = `${m.task} · ${m.algo || "?"} · seed ${m.seed ?? "-"} · ${m.success ? "success" : "no success"}` +
      (m.env_steps ? ` · recorded at ${m.env_steps} env steps` : "");
    $("goal").textContent = "Goal: " + (m.goal || "-");
    $("scrub").max = ep.view.length - 1;
    drawCurve();
    show(0);
  }

  EPISODES.forEach((e, k) => $("episode").append(el("option", {value: k}, e.name)));
  $("episode").hidden = EPISODES.length < 2;
  $("episode").addEventListener("change", (e) => load(Number(e.target.value)));
  $("scrub").addEventListener("input", (e) => { pause(); show(Number(e.target.value)); });
  $("play").addEventListener("click", () => (timer ? pause() : play()));
  $("speed").addEventListener("change", () => { if (timer) { pause(); play(); } });
  $("curve").addEventListener("click", (e) => {
    const r = $("curve").getBoundingClientRect();
    const x = (e.clientX - r.left) * W / r.width;
    pause();
    show(Math.round((x - X0) / (X1 - X0) * (ep.view.length - 1)));
  });
  document.addEventListener("keydown", (e) => {
    if (["SELECT", "INPUT", "BUTTON"].includes(e.target.tagName) && e.key !== "ArrowRight" && e.key !== "ArrowLeft") return;
    if (e.target.tagName === "INPUT" || e.target.tagName === "SELECT") return;  // the scrubber moves itself
    if (e.key === "ArrowRight") { pause(); show(t + 1); }
    else if (e.key === "ArrowLeft") { pause(); show(t - 1); }
    else if (e.key === " ") { e.preventDefault(); timer ? pause() : play(); }
    else return;
    e.preventDefault();
  });
  // a link can name an episode and a frame: viewer.html#ep=1&t=25
  const want = new URLSearchParams(location.hash.slice(1));
  const k0 = Math.max(0, Math.min(EPISODES.length - 1, Number(want.get("ep")) || 0));
  $("episode").value = k0;
  load(k0);
  if (want.has("t")) show(Number(want.get("t")) || 0);
})();
