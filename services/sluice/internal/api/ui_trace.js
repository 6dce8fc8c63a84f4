"use strict";
// The trace view of /ui: /ui?trace=ID draws the trace and every trace
// joined to it by span links (GET /api/v1/traces/ID, read by the server
// from Jaeger's query API) as span trees on one time axis: a row per span,
// indented under its parent, coloured by service, with a duration bar;
// a click on a row shows its attributes, events and links. A destination's
// page links its packs' traces here (cell, latest); the header's box opens
// any trace id. ui.html calls sluiceTrace.open(params) first: true when
// it drew this view (the status page then does not poll).
const sluiceTrace = (() => {
  const SERVICES = ["reader", "router", "flusher", "indexer", "publisher"];
  const $ = id => document.getElementById(id);
  const esc = s => String(s ?? "").replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  const idOf = tp => (tp || "").split("-")[1] || "";
  const here = id => "/ui?trace=" + encodeURIComponent(id);
  const ext = (ui, id) => ui.replace(/\/$/, "") + "/trace/" + encodeURIComponent(id);

  const css = document.createElement("style");
  css.textContent = `
  form#t-open { margin-left: auto; display: flex; gap: 4px; }
  form#t-open input { width: 290px; font-family: ui-monospace, monospace; font-size: 12px; }
  #trace h2 #t-name { text-transform: none; letter-spacing: 0; font-family: ui-monospace, monospace; }
  #trace .t-head { display: flex; gap: 14px; align-items: baseline; flex-wrap: wrap; margin: 8px 0; }
  #trace .t-legend span { margin-right: 10px; }
  #trace .t-dot { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; vertical-align: -1px; }
  #trace .t-box { background: #fff; border: 1px solid #e5e7eb; }
  #trace .t-row { display: grid; grid-template-columns: 440px 1fr 90px; align-items: center; border-bottom: 1px solid #eef0f3; min-height: 20px; }
  #trace .t-axis { position: sticky; top: 0; background: #eef0f4; font-weight: 600; color: #4b5563; font-size: 12px; z-index: 1; }
  #trace .t-axis .t-ticks { position: relative; height: 20px; }
  #trace .t-axis .t-ticks span { position: absolute; top: 2px; transform: translateX(-50%); white-space: nowrap; }
  #trace .t-trace { background: #f8f9fb; font-weight: 600; padding: 3px 8px; border-bottom: 1px solid #e5e7eb; }
  #trace .t-trace.asked { background: #e0eaff; }
  #trace .t-span { cursor: pointer; }
  #trace .t-span:hover { background: #f4f5f8; }
  #trace .t-name { padding: 1px 8px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  #trace .t-svc { display: inline-block; min-width: 64px; padding: 0 5px; border-radius: 3px; color: #fff; font-size: 11px; font-weight: 600; margin-right: 6px; text-align: center; }
  #trace .t-lane { position: relative; height: 14px; margin: 0 6px; }
  #trace .t-bar { position: absolute; top: 2px; height: 10px; min-width: 2px; border-radius: 2px; }
  #trace .t-dur { text-align: right; padding-right: 8px; font-variant-numeric: tabular-nums; color: #4b5563; }
  #trace .t-span.err .t-name { color: #b42318; }
  #trace .t-detail { padding: 4px 12px 8px 40px; background: #fbfcfd; border-bottom: 1px solid #eef0f3; }
  #trace .t-detail table { width: auto; border: 0; }
  #trace .t-detail td { padding: 1px 10px 1px 0; border: 0; white-space: normal; overflow-wrap: anywhere; max-width: 900px; }
  #trace .t-detail td:first-child { color: #6b7280; white-space: nowrap; }
  `;
  document.head.appendChild(css);
  const COLORS = {reader: "#3538cd", router: "#0e9384", flusher: "#dc6803", indexer: "#7a5af8", publisher: "#067647"};
  const color = s => COLORS[s] || "#667085";

  // The header's box: open any trace id (or a whole traceparent).
  const form = document.createElement("form");
  form.id = "t-open";
  form.innerHTML = '<input id="t-id" placeholder="trace id or traceparent…" autocomplete="off" spellcheck="false"><button>open trace</button>';
  form.onsubmit = e => {
    e.preventDefault();
    let v = $("t-id").value.trim();
    if (v.includes("-")) v = idOf(v);
    if (v) location.href = here(v.toLowerCase());
  };
  document.querySelector("header").appendChild(form);

  function dur(us) {
    if (us < 1000) return us + " µs";
    if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 2 : 1) + " ms";
    return (us / 1e6).toFixed(2) + " s";
  }
  const val = v => typeof v === "object" && v !== null ? JSON.stringify(v) : String(v);

  // A pack's trace cell on a destination's page (page: GET /api/v1/packs).
  function cell(tp, page) {
    const id = idOf(tp);
    if (!id) return "";
    const short = esc(id.slice(0, 12)) + "…";
    if (page.jaeger_ui) {
      return '<a class="trace" href="' + esc(ext(page.jaeger_ui, id)) + '" target="_blank">' + short + "</a>" +
        (page.trace_view ? ' <a class="trace-here" href="' + esc(here(id)) + '" title="this trace in sluice\'s own view">view</a>' : "");
    }
    return page.trace_view ? '<a class="trace" href="' + esc(here(id)) + '">' + short + "</a>" : short;
  }
  // The "latest trace" link beside a destination's last packs.
  function latest(packs, page) {
    const k = packs.find(k => k.traceparent), id = k ? idOf(k.traceparent) : "";
    if (!page.jaeger_ui && !page.trace_view) return '<span class="muted">(set telemetry.jaeger_query to see traces: make run does)</span>';
    if (!id) return "";
    const a = [];
    if (page.jaeger_ui) a.push('<a id="d-jaeger" href="' + esc(ext(page.jaeger_ui, id)) + '" target="_blank">latest trace in Jaeger »</a>');
    if (page.trace_view) a.push('<a id="d-traceview" href="' + esc(here(id)) + '">latest trace »</a>');
    return a.join(" · ");
  }

  function detail(s) {
    const rows = [["service", esc(s.service) + (s.process ? ' <span class="muted">(' + esc(s.process) + ")</span>" : "")],
      ["span", esc(s.span_id) + (s.parent_id ? ' <span class="muted">child of ' + esc(s.parent_id) + "</span>" : "")],
      ["start", esc(new Date(s.start_us / 1000).toISOString()) + " · " + esc(dur(s.duration_us))]];
    for (const kv of s.attributes || []) rows.push([esc(kv.key), esc(val(kv.value))]);
    for (const ev of s.events || []) rows.push(["event +" + esc(dur(Math.max(0, ev.time_us - s.start_us))), esc((ev.fields || []).map(f => f.key + "=" + val(f.value)).join(" "))]);
    for (const l of s.links || []) rows.push(["link", '<a href="' + esc(here(l.trace_id || l.traceID)) + '">trace ' + esc(l.trace_id || l.traceID) + "</a> span " + esc(l.span_id || l.spanID)]);
    return '<div class="t-detail"><table>' + rows.map(r => "<tr><td>" + r[0] + "</td><td>" + r[1] + "</td></tr>").join("") + "</table></div>";
  }

  function render(v) {
    const t0 = v.start_us, span = Math.max(1, v.end_us - v.start_us);
    const pct = us => ((us - t0) / span * 100).toFixed(3) + "%";
    let spans = 0;
    for (const t of v.traces) spans += t.spans.length;
    const head = '<div class="t-head"><b>' + spans + " spans in " + v.traces.length + (v.traces.length === 1 ? " trace" : " traces") + "</b>" +
      "<span>" + esc(dur(span)) + " from first to last</span>" +
      '<span class="t-legend" id="t-services">' + v.services.map(s => '<span data-service="' + esc(s) + '"><span class="t-dot" style="background:' + color(s) + '"></span>' + esc(s) + "</span>").join("") + "</span>" +
      (v.truncated ? '<span class="bad">joined traces cut at ' + v.traces.length + "</span>" : "") +
      (v.jaeger_ui ? '<a href="' + esc(ext(v.jaeger_ui, v.trace_id)) + '" target="_blank">in Jaeger »</a>' : "") + "</div>";
    const ticks = [0, 0.25, 0.5, 0.75, 1].map(f => '<span style="left:' + (f * 100) + '%">' + (f === 0 ? "0" : "+" + esc(dur(Math.round(span * f)))) + "</span>").join("");
    const axis = '<div class="t-row t-axis"><div class="t-name">service · operation</div><div class="t-lane t-ticks">' + ticks + '</div><div class="t-dur">duration</div></div>';
    const body = v.traces.map(t => '<div class="t-trace' + (t.asked ? " asked" : "") + '" data-trace="' + esc(t.trace_id) + '">trace ' + esc(t.trace_id) +
      (t.asked ? ' <span class="muted">(the one asked for)</span>' : "") + "</div>" +
      t.spans.map((s, i) => '<div class="t-row t-span' + (s.error ? " err" : "") + '" data-service="' + esc(s.service) + '" data-trace="' + esc(t.trace_id) + '" data-i="' + i + '">' +
        '<div class="t-name" style="padding-left:' + (8 + s.depth * 16) + 'px" title="' + esc(s.operation) + '"><span class="t-svc" style="background:' + color(s.service) + '">' + esc(s.service) + "</span>" + esc(s.operation) +
        (s.links && s.links.length ? ' <span class="muted">↪ ' + s.links.length + "</span>" : "") + "</div>" +
        '<div class="t-lane"><div class="t-bar" style="left:' + pct(s.start_us) + ";width:" + (s.duration_us / span * 100).toFixed(3) + "%;background:" + color(s.service) + '"></div></div>' +
        '<div class="t-dur">' + esc(dur(s.duration_us)) + "</div></div>").join("")).join("");
    $("t-body").innerHTML = head + '<div class="t-box">' + axis + body + "</div>";
    const byTrace = {};
    for (const t of v.traces) byTrace[t.trace_id] = t;
    $("t-body").onclick = e => {
      const row = e.target.closest(".t-span");
      if (!row || e.target.closest("a")) return;
      const next = row.nextElementSibling;
      if (next && next.classList.contains("t-detail")) { next.remove(); return; }
      row.insertAdjacentHTML("afterend", detail(byTrace[row.dataset.trace].spans[Number(row.dataset.i)]));
    };
  }

  // open draws /ui?trace=ID when params has one.
  function open(params) {
    const id = (params.get("trace") || "").trim().toLowerCase();
    if (!id) return false;
    for (const s of ["overview", "dest"]) { const el = $(s); if (el) el.classList.add("hidden"); }
    const auto = $("auto"); // a trace does not change: nothing to refresh
    if (auto && auto.closest("label")) auto.closest("label").classList.add("hidden");
    $("t-id").value = id;
    document.title = "sluice · trace " + id.slice(0, 12);
    const sec = document.createElement("div");
    sec.id = "trace";
    sec.innerHTML = '<h2><a href="/ui">« status</a> &nbsp; trace <span id="t-name">' + esc(id) + '</span></h2><div id="t-body"><p class="muted" id="t-loading">asking Jaeger…</p></div>';
    document.querySelector("main").appendChild(sec);
    // A pack's newest trace may not be in Jaeger yet (spans are sent in
    // batches, seconds after they end): a 404 is asked again a few times.
    const load = tries => fetch("/api/v1/traces/" + encodeURIComponent(id)).then(async r => {
      const body = await r.json().catch(() => ({}));
      if (r.status === 404 && tries > 0) {
        $("t-body").innerHTML = '<p class="muted" id="t-loading">' + esc(body.error || "not found") + "; asking again in 2s (spans reach Jaeger seconds after they end)…</p>";
        setTimeout(() => load(tries - 1), 2000);
        return;
      }
      if (!r.ok) throw new Error(body.error || "HTTP " + r.status);
      render(body);
      $("updated").textContent = "trace read " + new Date().toLocaleTimeString();
    }).catch(e => {
      $("t-body").innerHTML = '<p class="bad" id="t-error">' + esc(e.message || e) + "</p>";
      $("updated").textContent = "";
    });
    load(5);
    return true;
  }
  return {cell, latest, open, SERVICES};
})();
