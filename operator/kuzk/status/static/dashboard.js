// The kuzk dashboard: polls /status every 1.5 s with If-None-Match and renders the fleet and
// one page of jobs (?limit=PAGE, the next page by metadata.continue), so a fleet of ten
// thousand jobs costs the page what fifty do. On a failed poll it keeps the last good render
// and says since when it is stale.
"use strict";

const POLL_MS = 1500;
const TIMEOUT_MS = 5000;
const PAGE = 50;
const STATES = ["pending", "scheduled", "synthesizing", "synth_done", "gpu", "committing", "done",
                "failed"];

let etag = null;
let doc = null;
let docAt = 0;          // performance.now() when the current document arrived
let lastGood = null;    // Date of the last successful poll
// The continue token of each page visited (null: the first page).
const pages = [null];
let page = 0;
let timer = null;
let polling = false;
let again = false;      // poll again at once when this poll ends (the page changed meanwhile)

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function secs(value) {
  if (value === null || value === undefined) return "–";
  if (value < 60) return `${value.toFixed(1)} s`;
  if (value < 3600) return `${Math.floor(value / 60)} m ${Math.round(value % 60)} s`;
  return `${Math.floor(value / 3600)} h ${Math.round((value % 3600) / 60)} m`;
}

function pct(value) {
  return value === null || value === undefined ? "–" : `${Math.round(value * 100)} %`;
}

function clock(date) {
  return date.toTimeString().slice(0, 8);
}

function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (value >= 1024 && i < units.length - 1) { value /= 1024; i += 1; }
  return `${i ? value.toFixed(1) : value} ${units[i]}`;
}

// What lanes synthesize, wait for and hold: a GPU card's line, and a node's with its
// allocatable memory beside.
function memoryLine(m) {
  return `${m.lanes_synthesizing} synthesizing · ${m.lanes_waiting} waiting for GPU · ` +
    `host ${bytes(m.host_memory_bytes)} · device ${bytes(m.device_memory_bytes)}`;
}

function stat(label, value, extra) {
  return el("div", {class: `stat ${extra || ""}`},
    el("div", {class: "label", text: label}), el("div", {class: "value", text: value}));
}

function renderFleet(d) {
  const f = d.fleet, c = d.counters;
  const kinds = Object.keys(c.completed_by_kind)
    .filter(k => c.completed_by_kind[k] || c.failed_by_kind[k])
    .map(k => `${k} ${c.completed_by_kind[k]} done / ${c.failed_by_kind[k]} failed`);
  document.getElementById("fleet").replaceChildren(
    stat("GPUs in GPU phase", `${f.gpus_proving} / ${f.gpus}`),
    stat("GPUs waiting on CPU", String(f.gpus_waiting)),
    stat("fleet busy (10 min)", pct(f.busy_fraction_10m)),
    stat("queue depth", String(c.queue_depth)),
    stat("partitions done", String(c.total_completed)),
    stat("partitions failed", String(c.total_failed)),
    stat("stale writes rejected", String(c.stale_writes_rejected)),
    stat("by kind", kinds.length ? kinds.join(" · ") : "none yet", "kinds"),
  );
}

function shortJob(jobId) {
  return jobId ? jobId.slice(jobId.indexOf("/") + 1) : "";
}

const REASONS = {no_work: "no work", scheduling: "scheduling", cpu: "CPU", not_live: "lane not live"};

function laneLine(lane, drift) {
  const ready = lane.ready_secs !== null && lane.stage === "synth_done";
  const doing = lane.not_live_secs !== null ? `${lane.stage}, not live ${secs(lane.not_live_secs + drift)}`
    : ready ? `waiting for GPU ${secs(lane.ready_secs + drift)}`
    : `${lane.stage} ${secs(lane.stage_secs + drift)}`;
  return el("li", {class: `lane ${lane.stage}`, title: `${lane.job_id} · pod ${lane.pod}`,
    text: `${shortJob(lane.job_id)} P${lane.partition} · ${doing}`});
}

function renderWorkers(d, drift) {
  const cards = d.gpu_workers.map(w => {
    const held = w.holder;
    const doing = held && !w.idle_reason
      ? `${shortJob(held.job_id)} P${held.partition} · gpu ${secs(held.since_secs + drift)}`
      : `idle: ${REASONS[w.idle_reason] || w.idle_reason || "?"}`;
    const strip = el("div", {class: "strip", title: `busy ${pct(w.busy_fraction_10m)} of the last 10 min`});
    w.busy_strip_10m.forEach((share, i) => {
      const reason = (w.idle_strip_10m || [])[i];
      const cell = el("span", share === null ? {class: "before"}
        : {title: `busy ${pct(share)}${reason ? ", idle mostly: " + REASONS[reason] : ""}`});
      if (share !== null) cell.style.background =
        `color-mix(in srgb, var(--proving) ${Math.round(share * 100)}%, var(--idle-${reason || "no_work"}))`;
      strip.append(cell);
    });
    const others = w.lanes.filter(lane => !held || lane.pod !== held.pod);
    return el("article", {class: `card ${w.state}`, "data-worker": `${w.node}/${w.worker_id}`},
      el("div", {class: "title"}, `${w.node} · ${w.worker_id} · `,
        el("span", {class: "state", text: w.state})),
      el("div", {class: "doing", text: doing, title: held ? held.job_id : null}),
      el("ul", {class: "lanes"}, ...others.map(lane => laneLine(lane, drift))),
      el("div", {class: "memory", text: memoryLine(w)}),
      el("div", {class: "meta",
        text: `${w.gpu_uuid || "no GPU UUID"}${w.gpu_name ? " · " + w.gpu_name : ""} · ` +
              `${w.completed} done · busy ${pct(w.busy_fraction_10m)}`}),
      strip);
  });
  const box = document.getElementById("workers");
  box.replaceChildren(...(cards.length ? cards : [el("p", {class: "empty", text: "no GPU workers yet"})]));
}

function renderNodes(d) {
  const rows = (d.nodes || []).map(n => el("li", {class: "node", "data-node": n.node},
    el("span", {class: "name", text: n.node}),
    el("span", {class: "facts", text: `${n.gpus} GPUs · ${n.lanes} lanes · ${memoryLine(n)}` +
      ` of ${bytes(n.allocatable_memory_bytes)} allocatable`})));
  document.getElementById("nodes").replaceChildren(...rows);
}

function partitionTitle(p) {
  const parts = [`P${p.index} · ${p.state} · attempt ${p.attempt}`];
  if (p.node) parts.push(`node ${p.node}${p.worker ? " " + p.worker : ""}`);
  if (p.synth_ms !== null) parts.push(`synth ${p.synth_ms} ms`);
  if (p.gpu_ms !== null) parts.push(`gpu ${p.gpu_ms} ms`);
  if (p.stage_secs !== null) parts.push(`${p.state} for ${secs(p.stage_secs)}`);
  if (p.reason) parts.push(`${p.reason}${p.message ? ": " + p.message : ""}`);
  return parts.join(" · ");
}

function renderJobs(d, drift) {
  const jobs = d.pipelines.map(j => {
    const grid = el("div", {class: "grid"});
    const reasons = el("ul", {class: "reasons"});
    const waiting = new Map();  // why pending partitions wait -> their indexes
    for (const p of j.partitions) {
      grid.append(el("span", {class: `cell s-${p.state}`, "data-state": p.state,
                              title: partitionTitle(p), text: String(p.index)}));
      const why = `${p.reason || "failed"}${p.message ? " — " + p.message : ""}`;
      if (p.state === "failed") {
        reasons.append(el("li", {class: "failed", text: `P${p.index}: ${why}`}));
      } else if (p.state === "pending" && p.reason) {
        waiting.set(why, [...(waiting.get(why) || []), p.index]);
      }
    }
    for (const [why, indexes] of waiting) {
      reasons.append(el("li", {class: "waiting",
        text: `${indexes.map(i => "P" + i).join(", ")} waiting: ${why}`}));
    }
    const started = j.started_secs_ago === null ? "not started" : `started ${secs(j.started_secs_ago + drift)} ago`;
    return el("article", {class: "job", "data-job": j.job_id},
      el("div", {class: "head"},
        el("span", {class: "id", title: j.job_id, text: j.job_id}),
        el("span", {class: `phase ${j.phase}`, text: j.phase}),
        el("span", {class: "facts",
          text: `${j.proof_kind} · ${j.partitions_done}/${j.total_partitions} done` +
                `${j.partitions_failed ? ` · ${j.partitions_failed} failed` : ""} · ${started}`})),
      grid, reasons.childElementCount ? reasons : null);
  });
  document.getElementById("jobs").replaceChildren(
    ...(jobs.length ? jobs : [el("p", {class: "empty", text: "no jobs"})]));
}

function renderPager(d) {
  const shown = d.pipelines.length;
  document.getElementById("page-label").textContent =
    `page ${page + 1} · ${shown} job${shown === 1 ? "" : "s"} · ` +
    `${d.metadata.remaining_item_count} more`;
  document.getElementById("prev").disabled = page === 0;
  document.getElementById("next").disabled = d.metadata.continue === null;
}

function render() {
  if (!doc) return;
  const drift = (performance.now() - docAt) / 1000;
  renderFleet(doc);
  renderNodes(doc);
  renderWorkers(doc, drift);
  renderJobs(doc, drift);
  renderPager(doc);
}

function turn(to) {
  if (to > page) {
    if (!doc || doc.metadata.continue === null) return;
    pages.length = page + 1;
    pages.push(doc.metadata.continue);
  }
  page = to;
  etag = null;
  pollNow();
}

function query() {
  const params = new URLSearchParams({limit: String(PAGE)});
  if (pages[page] !== null) params.set("continue", pages[page]);
  return `/status?${params}`;
}

function freshness(ok) {
  const badge = document.getElementById("freshness");
  if (ok) {
    badge.className = "freshness live";
    badge.dataset.state = "live";
    badge.textContent = doc.view.synced ? `live · ${clock(lastGood)}` : "live · view syncing";
  } else if (lastGood) {
    badge.className = "freshness stale";
    badge.dataset.state = "stale";
    badge.textContent = `stale since ${clock(lastGood)}`;
  }
}

function schedule(ms) {
  clearTimeout(timer);
  timer = setTimeout(poll, ms);
}

function pollNow() {
  if (polling) again = true;
  else schedule(0);
}

async function poll() {
  polling = true;
  const asked = page;
  const abort = new AbortController();
  const deadline = setTimeout(() => abort.abort(), TIMEOUT_MS);
  try {
    const headers = etag ? {"If-None-Match": etag} : {};
    const response = await fetch(query(), {headers, cache: "no-store", signal: abort.signal});
    if (asked !== page) return;  // the page changed while this one was asked for
    if (response.status === 410) {
      // Jobs joined or left the listing: go on from the same job in the new one.
      pages[page] = (await response.json()).continue;
      etag = null;
      again = true;
      return;
    }
    if (response.status === 200) {
      doc = await response.json();
      etag = response.headers.get("ETag");
      docAt = performance.now();
      if (page > 0 && doc.pipelines.length === 0) {  // the jobs of this page are gone
        page = 0;
        again = true;
      }
    } else if (response.status !== 304) {
      throw new Error(`status ${response.status}`);
    }
    lastGood = new Date();
    render();
    freshness(true);
  } catch (error) {
    freshness(false);
  } finally {
    clearTimeout(deadline);
    polling = false;
    schedule(again ? 0 : POLL_MS);
    again = false;
  }
}

document.getElementById("legend").replaceChildren(
  ...STATES.map(s => el("span", {class: `cell s-${s}`, text: s})),
  el("span", {class: "strip-key busy", text: "GPU phase"}),
  ...Object.entries(REASONS).map(([k, v]) => el("span", {class: `strip-key idle-${k}`, text: `idle: ${v}`})));
document.getElementById("prev").addEventListener("click", () => turn(page - 1));
document.getElementById("next").addEventListener("click", () => turn(page + 1));
poll();
