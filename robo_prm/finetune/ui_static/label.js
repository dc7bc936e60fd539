// robo-prm labelling page. Texts are set with textContent: scene texts and reasons are model output.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const TOKEN = document.querySelector('meta[name="token"]').content;
  let data = null, cur = 0, sel = new Set();

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const status = (text, cls) => { $("status").textContent = text; $("status").className = "small " + (cls || ""); };
  const item = () => data.items[cur];
  const task = () => data.tasks[item().task];

  async function post(path, fields) {
    const body = new URLSearchParams({token: TOKEN, ...fields});
    for (const h of fields.hazards || []) body.append("hazard", h);
    body.delete("hazards");
    const r = await fetch(path, {method: "POST", body, headers: {"Content-Type": "application/x-www-form-urlencoded"}});
    const text = await r.text();
    if (!r.ok) throw new Error(text.startsWith("{") ? JSON.parse(text).error : text);
    return JSON.parse(text);
  }

  function strip() {
    const it = item(), box = $("strip");
    box.replaceChildren();
    if (!it.episode) return;
    const same = data.items.filter((o) => o.episode === it.episode).sort((a, b) => (a.step ?? 0) - (b.step ?? 0));
    $("episode").textContent = `episode ${it.episode} · ${same.length} labelled frames`;
    for (const o of same) {
      const d = el("div", {class: "thumb" + (o.i === cur ? " cur" : "") + (o.answer ? " answered" : ""), "data-i": o.i});
      d.append(o.frame ? el("img", {src: `/frame?i=${o.i}`, alt: `step ${o.step}`, loading: "lazy"}) : el("div", {}, "-"));
      d.append(el("span", {}, `${o.step ?? "?"}` + (o.answer ? ` · ${o.answer.score}` : "")));
      d.addEventListener("click", () => go(o.i));
      box.append(d);
    }
    const c = box.querySelector(".cur");  // centre the current frame without scrolling the page
    if (c) box.scrollLeft = c.offsetLeft - box.offsetLeft - (box.clientWidth - c.offsetWidth) / 2;
  }

  function render() {
    const it = item(), t = task();
    $("pos").textContent = `scene ${cur + 1} of ${data.items.length}`;
    $("done").textContent = `${data.items.filter((o) => o.answer).length} answered → ${data.out}`;
    $("frame").hidden = !it.frame; $("noframe").hidden = it.frame;
    if (it.frame) $("frame").src = `/frame?i=${cur}`; else $("frame").removeAttribute("src");
    $("goal").textContent = t.goal; $("background").textContent = t.background;
    $("dimensions").replaceChildren(...t.dimensions.map((d) => el("li", {}, d)));
    $("scene").textContent = it.scene;
    $("hazkeys").textContent = t.hazards.map((h) => h.key).join(" ");
    const hz = $("hazards");
    hz.replaceChildren();
    if (!t.hazards.length) hz.append(el("span", {class: "dim"}, "none defined"));
    for (const h of t.hazards) {
      const s = el("span", {class: "haz" + (sel.has(h.name) ? " on" : ""), title: h.text, "data-name": h.name}, `${h.key}: ${h.name}`);
      s.addEventListener("click", () => toggle(h.name));
      hz.append(s);
    }
    $("scores").replaceChildren(...Array.from({length: 10}, (_, k) => {
      const b = el("button", {class: it.answer && it.answer.score === k + 1 ? "sel" : "", title: `key ${(k + 1) % 10}`}, String(k + 1));
      b.addEventListener("click", () => answer(k + 1));
      return b;
    }));
    strip();
    compare();
  }

  async function compare() {
    const it = item(), box = $("compare");
    box.hidden = !it.answer;
    if (!it.answer) return;
    $("your-score").textContent = it.answer.score;
    $("your-hazards").textContent = it.answer.hazards.join(", ") || "none";
    for (const id of ["judge-score", "judge-hazards", "judge-reason"]) $(id).textContent = data.judge ? "…" : "no judge";
    if (!data.judge) return;
    const i = cur;
    try {
      const r = await fetch(`/api/judge?i=${i}`);
      const j = await r.json();
      if (i !== cur) return;
      if (!r.ok) throw new Error(j.error);
      $("judge-score").textContent = `${j.score.toFixed(1)}  (conf ${j.confidence.toFixed(2)}, ${j.backend})`;
      $("judge-hazards").textContent = j.hazards.filter((h) => h.p >= 0.5).map((h) => `${h.name} ${h.p.toFixed(2)}`).join(", ") || "none";
      $("judge-reason").textContent = j.reason || "-";
    } catch (e) { if (i === cur) $("judge-reason").textContent = "judge failed: " + e.message; }
  }

  function go(i) {
    cur = Math.max(0, Math.min(data.items.length - 1, i));
    sel = new Set(item().answer ? item().answer.hazards : []);
    history.replaceState(null, "", `/?i=${cur}`);
    render();
    const next = data.items[cur + 1];  // the next episode's frames are rendered while this one is read
    if (next && next.frame && next.episode !== item().episode) new Image().src = `/frame?i=${cur + 1}`;
  }

  function toggle(name) { sel.has(name) ? sel.delete(name) : sel.add(name); render(); }

  function nextUnanswered(from) {
    for (let k = 1; k <= data.items.length; k++) {
      const i = (from + k) % data.items.length;
      if (!data.items[i].answer) return i;
    }
    return Math.min(from + 1, data.items.length - 1);
  }

  // An answer is taken at once (the page moves on while it is saved): posts go out one after another, in
  // key order, and a refused one puts the item back to unanswered with the reason in the status line.
  let saving = Promise.resolve();
  function answer(score) {
    const i = cur, hazards = [...sel], before = data.items[i].answer;
    data.items[i].answer = {score, hazards};
    $("last").hidden = false;
    $("last").textContent = `last answer: scene ${i + 1} = ${score} (← to compare it with the judge)`;
    if ($("auto").checked) go(nextUnanswered(i)); else render();
    saving = saving.then(async () => {
      try {
        const r = await post("/label", {i, score, hazards});
        data.items[i].answer = r.answer;
        status(`saved scene ${i + 1}: ${score}` + (hazards.length ? ` + ${hazards.join(", ")}` : "") + ` (${r.done} answered)`, "ok");
      } catch (e) {
        data.items[i].answer = before;
        status(`scene ${i + 1} not saved: ${e.message}`, "err");
      }
      if (i === cur || data.items[cur].episode === data.items[i].episode) render();
    });
  }

  async function undo() {
    await saving;  // undo the newest answer, so the saves in flight land first
    try {
      const r = await post("/undo", {});
      await load();
      go(r.i);
      status(`undid the answer to scene ${r.i + 1}`, "ok");
    } catch (e) { status("undo: " + e.message, "err"); }
  }

  async function load() { data = await (await fetch("/api/items")).json(); }

  document.addEventListener("keydown", (e) => {
    if (!data || e.ctrlKey || e.metaKey || e.altKey) return;
    const k = e.key;
    const haz = task().hazards.find((h) => h.key === k);
    if (/^[0-9]$/.test(k)) answer(k === "0" ? 10 : Number(k));
    else if (haz) toggle(haz.name);
    else if (k === "ArrowRight") go(cur + 1);
    else if (k === "ArrowLeft") go(cur - 1);
    else if (k === "n") go(nextUnanswered(cur));
    else if (k === "u") undo();
    else if (k === "a") $("auto").checked = !$("auto").checked;
    else return;
    e.preventDefault();
  });

  load().then(() => {
    if (!data.items.length) { status("the queue is empty", "err"); return; }
    const start = Number(document.querySelector('meta[name="start"]').content);
    go(start < data.items.length ? start : nextUnanswered(data.items.length - 1));
  });
})();
