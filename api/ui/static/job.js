// One job: every chain's rounds, each round's workflow drawn as a graph laid out by dagre
// (nodes = steps, edges = what each step's access list lets it see). While the job runs, the
// page polls /ui/jobs/ID/data once a second and redraws only when the view changed.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const NODE_W = 190, NODE_H = 70;
  let job = JSON.parse(document.getElementById("job-data").textContent);
  let lastText = JSON.stringify(job);
  let selected = null; // step_id shown in the side panel
  const steps = new Map(); // step_id -> [step, round]

  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const svgEl = (tag, attrs) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  };
  const usd = (v) => (v == null ? "-" : "$" + Number(v).toFixed(v < 1 ? 5 : 2));
  const secs = (v) => (v == null ? "-" : Number(v).toFixed(1) + " s");

  // The steps a step sees: its stored dependencies, else its access list ("all" = every earlier step).
  function sources(step) {
    if (Array.isArray(step.dependencies)) return step.dependencies;
    if (step.access === "all") return [...Array(step.index).keys()];
    return Array.isArray(step.access) ? step.access.filter((i) => Number.isInteger(i)) : [];
  }

  function graph(round) {
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 46, marginx: 8, marginy: 8 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const st of round.steps) g.setNode(String(st.index), { width: NODE_W, height: NODE_H });
    for (const st of round.steps) for (const src of sources(st)) g.setEdge(String(src), String(st.index));
    dagre.layout(g);
    const { width, height } = g.graph();
    const svg = svgEl("svg", { class: "workflow", width: Math.max(width, 10), height: Math.max(height, 10),
                               "data-round": round.round_id });
    const defs = svgEl("defs");
    const marker = svgEl("marker", { id: "arrow-" + round.round_id, viewBox: "0 0 10 10", refX: 10, refY: 5,
                                     markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    marker.appendChild(svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }));
    defs.appendChild(marker);
    svg.appendChild(defs);
    for (const e of g.edges()) {
      const pts = g.edge(e).points;
      const d = "M " + pts.map((p) => p.x.toFixed(1) + " " + p.y.toFixed(1)).join(" L ");
      svg.appendChild(svgEl("path", { d, class: "edge", "data-from": e.v, "data-to": e.w,
                                      "marker-end": "url(#arrow-" + round.round_id + ")" }));
    }
    for (const st of round.steps) {
      const n = g.node(String(st.index));
      const grp = svgEl("g", { class: "node s-" + st.status + (st.step_id === selected ? " selected" : ""),
                               transform: `translate(${n.x - NODE_W / 2},${n.y - NODE_H / 2})`,
                               "data-step": st.index, "data-step-id": st.step_id, "data-status": st.status,
                               tabindex: 0, role: "button" });
      grp.appendChild(svgEl("rect", { width: NODE_W, height: NODE_H, rx: 6 }));
      const lines = [
        `#${st.index} ${st.worker}`,
        `${st.status}${st.attempts > 1 ? " · retries " + (st.attempts - 1) : ""}`,
        `${st.tokens} tok · ${usd(st.cost_usd)} · ${secs(st.latency_s)}`,
      ];
      lines.forEach((t, i) => {
        const text = svgEl("text", { x: 8, y: 18 + i * 19, class: i === 0 ? "title" : "" });
        text.textContent = t.length > 30 ? t.slice(0, 29) + "…" : t;
        grp.appendChild(text);
      });
      svg.appendChild(grp);
    }
    return svg;
  }

  function renderRound(round, chain, nestedByStep) {
    const box = el("article", { class: "round", "data-round-id": round.round_id });
    const head = el("header");
    head.appendChild(el("strong", {}, `Round ${round.index}`));
    head.appendChild(el("span", { class: "pill" }, round.kind));
    head.appendChild(el("span", { class: "pill s-" + round.status }, round.status));
    head.appendChild(el("span", { class: "pill parse-" + (round.parse_status || "none") },
                        "parse: " + (round.parse_status || "-")));
    head.appendChild(el("span", { class: "dim" },
                        `${round.tokens} tok · ${usd(round.cost_usd)} · ${secs(round.latency_s)}` +
                        (round.policy_version ? " · policy " + round.policy_version : "")));
    box.appendChild(head);
    if (round.plan_text) {
      const det = el("details", { class: "plan" });
      det.appendChild(el("summary", {}, "Plan text"));
      det.appendChild(el("pre", { class: "text" }, round.plan_text));
      box.appendChild(det);
    }
    if (round.parse_error) box.appendChild(el("p", { class: "error" }, "parse error: " + round.parse_error));
    if (round.steps.length) {
      const wrap = el("div", { class: "graph" });
      wrap.appendChild(graph(round));
      box.appendChild(wrap);
    }
    for (const st of round.steps) {
      steps.set(st.step_id, [st, round]);
      for (const nested of nestedByStep.get(st.step_id) || []) box.appendChild(renderChain(nested, nestedByStep, st));
    }
    if (round.answer) box.appendChild(el("p", { class: "answer" }, "round answer: " + round.answer));
    if (round.error) box.appendChild(el("p", { class: "error" }, round.error));
    return box;
  }

  function renderChain(chain, nestedByStep, parentStep) {
    const sec = el("section", { class: "chain depth-" + chain.depth, "data-chain": chain.chain_id });
    const title = parentStep
      ? `Nested workflow of step #${parentStep.index} (depth ${chain.depth})`
      : `Sample ${chain.sample}`;
    const h = el("h2", {}, title + " ");
    h.appendChild(el("span", { class: "pill s-" + chain.status }, chain.status));
    sec.appendChild(h);
    for (const r of chain.rounds) sec.appendChild(renderRound(r, chain, nestedByStep));
    if (chain.answer) sec.appendChild(el("p", { class: "answer" }, "chain answer: " + chain.answer));
    if (chain.error) sec.appendChild(el("p", { class: "error" }, chain.error));
    return sec;
  }

  function showStep(stepId) {
    const hit = steps.get(stepId);
    const panel = document.getElementById("step-detail");
    if (!hit) { panel.hidden = true; selected = null; return; }
    const [st, round] = hit;
    selected = stepId;
    document.querySelectorAll(".node.selected").forEach((n) => n.classList.remove("selected"));
    document.querySelectorAll(`.node[data-step-id="${stepId}"]`).forEach((n) => n.classList.add("selected"));
    document.getElementById("step-title").textContent = `Step #${st.index} of round ${round.index}`;
    const facts = document.getElementById("step-facts");
    facts.replaceChildren();
    const rows = [["worker", st.worker], ["model", st.model || "-"], ["status", st.status],
                  ["sees", JSON.stringify(st.access)], ["tokens", st.tokens], ["cost", usd(st.cost_usd)],
                  ["latency", secs(st.latency_s)], ["attempts", st.attempts]];
    for (const [k, v] of rows) { facts.appendChild(el("dt", {}, k)); facts.appendChild(el("dd", {}, String(v))); }
    document.getElementById("step-subtask").textContent = st.subtask;
    document.getElementById("step-output").textContent = st.output || (st.status === "done" ? "" : "(not yet)");
    document.getElementById("step-error-box").hidden = !st.error;
    document.getElementById("step-error").textContent = st.error || "";
    panel.hidden = false;
  }

  function render() {
    steps.clear();
    const status = document.getElementById("job-status");
    status.textContent = job.status;
    status.className = "pill s-" + job.status;
    document.getElementById("job-answer").textContent = job.answer || job.error || "…";
    document.getElementById("job-usage").textContent =
      `${job.prompt_tokens + job.completion_tokens} tokens · ${usd(job.cost_usd)} · ${job.model_calls} model calls`;
    const tbody = document.querySelector("#rewards tbody");
    tbody.replaceChildren();
    for (const r of job.rewards) {
      const tr = el("tr", { class: "reward" });
      for (const v of [r.value, r.correct, r.verifier, r.source, r.chain_id, r.round_id])
        tr.appendChild(el("td", {}, v == null ? "-" : String(v)));
      tbody.appendChild(tr);
    }
    if (!job.rewards.length) tbody.appendChild(el("tr", {}, "")).appendChild(el("td", { colspan: 6, class: "dim" }, "none yet"));
    const nestedByStep = new Map();
    for (const c of job.chains) {
      if (c.parent_step_id != null) {
        if (!nestedByStep.has(c.parent_step_id)) nestedByStep.set(c.parent_step_id, []);
        nestedByStep.get(c.parent_step_id).push(c);
      }
    }
    const root = document.getElementById("chains");
    const frag = document.createDocumentFragment();
    for (const c of job.chains) if (c.parent_step_id == null) frag.appendChild(renderChain(c, nestedByStep, null));
    root.replaceChildren(frag);
    if (selected != null) showStep(selected);
    document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
  }

  document.getElementById("chains").addEventListener("click", (ev) => {
    const node = ev.target.closest(".node");
    if (node) showStep(Number(node.dataset.stepId));
  });
  document.getElementById("chains").addEventListener("keydown", (ev) => {
    const node = ev.target.closest(".node");
    if (node && (ev.key === "Enter" || ev.key === " ")) showStep(Number(node.dataset.stepId));
  });
  document.querySelector("#step-detail .close").addEventListener("click", () => showStep(null));

  async function poll() {
    if (job.terminal) return;
    try {
      const r = await fetch(`/ui/jobs/${job.job_id}/data`, { credentials: "same-origin", cache: "no-store" });
      if (r.status === 401) { window.location.href = "/ui/login"; return; }
      if (r.ok) {
        const next = await r.json();
        const text = JSON.stringify(next); // both sides sorted by key on the server: equal when unchanged
        if (text !== lastText) { lastText = text; job = next; render(); }
      }
    } catch (e) { /* the next poll retries */ }
    if (!job.terminal) setTimeout(poll, 1000);
  }

  render();
  setTimeout(poll, 1000);
})();
