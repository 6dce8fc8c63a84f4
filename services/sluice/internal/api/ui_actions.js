"use strict";
// The operator's actions on the status page (GET /ui/actions.js, loaded by
// ui.html after its own script, whose helpers it uses: $, esc, num, td,
// badge, refresh, renderProgress, DEST). Every button calls the API route
// the CLI calls, through act(): same origin, the browser's credentials (the
// token as its Basic password, when the server has one) and the
// X-Sluice-Client header, so it passes the API's request guard
// (internal/api/guard.go) as no other site's page can. What is final asks
// first: retire and purge want the destination's name typed, a dead
// letter's purge a confirm(). A refused call shows the API's message.
//
// ui.html tells it when to look again by two events: "sluice:summary"
// (detail: the /api/v1/status/summary body, after the overview rendered
// it) and "sluice:refresh" (after every refresh).
(() => {
  const style = document.createElement("style");
  style.textContent = `
  #a-msg { margin: 8px 0 0; min-height: 18px; }
  #a-msg .ok::before { content: "✔ "; } #a-msg .bad::before { content: "✘ "; }
  .a-panel { background: #fff; border: 1px solid #e5e7eb; padding: 6px 12px; }
  .a-panel .toolbar { margin: 4px 0; }
  .a-panel .lbl { color: #6b7280; min-width: 70px; display: inline-block; }
  button.danger { color: #b42318; border-color: #f5b3ac; }
  button:disabled { cursor: default; opacity: .5; }
  .a-confirm { background: #fef3f2; border: 1px solid #f5b3ac; border-radius: 6px; padding: 6px 10px; margin: 4px 0; }
  .a-confirm input { width: 220px; }
  tr.a-detail td { white-space: pre-wrap; font: 12px/1.35 ui-monospace, monospace; background: #f8f9fb; }
  td.a-btns { text-align: right; } td.a-btns button { margin-left: 4px; }
  .pin { font-size: 12px; color: #93370d; }
  .s-active { background: #dcfae6; color: #067647; }
  `;
  document.head.appendChild(style);

  // act calls one action route and returns its JSON body; a refusal throws
  // the API's own message.
  async function act(method, path, body) {
    const headers = {"X-Sluice-Client": "sluice-ui"};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(path, {method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body)});
    const text = await r.text();
    let b = {};
    try { b = JSON.parse(text); } catch (e) { b = {error: text.trim()}; }
    if (!r.ok) throw new Error((b && b.error) || "HTTP " + r.status);
    return b;
  }
  async function get(path) {
    const r = await fetch(path, {credentials: "same-origin"});
    const b = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(b.error || "HTTP " + r.status);
    return b;
  }

  // The message line under the header: what the last action did, or why
  // it was refused.
  document.querySelector("main").insertAdjacentHTML("afterbegin", '<div id="a-msg" role="status"></div>');
  function say(ok, text) {
    $("a-msg").innerHTML = '<span class="' + (ok ? "ok" : "bad") + '">' + esc(text) + "</span>";
  }
  // run wraps a button's action: the button is disabled while it runs, and
  // the outcome is said.
  async function run(btn, what, f) {
    if (btn) btn.disabled = true;
    try {
      const msg = await f();
      if (msg) say(true, msg);
    } catch (e) {
      say(false, what + ": " + (e.message || e));
    } finally {
      if (btn) btn.disabled = false;
    }
  }

  // ---- resync ----
  async function resync(btn, table, destination) {
    await run(btn, "resync " + table + (destination ? " of " + destination : ""), async () => {
      const body = {table};
      if (destination) body.destination = destination;
      const q = await act("POST", "/api/v1/resyncs", body);
      watchResyncs();
      return "resync " + q.id + " of " + table + (destination ? " for " + destination : " (every destination)") + " queued";
    });
  }

  // ---- snapshots: pin and unpin ----
  async function pin(btn, version, on, reason) {
    await run(btn, (on ? "pin" : "unpin") + " v" + version, async () => {
      if (on) {
        const p = await act("POST", "/api/v1/snapshots/" + encodeURIComponent(version) + "/pin", reason ? {reason} : undefined);
        return "snapshot v" + p.version + " pinned" + (p.reason ? " (" + p.reason + ")" : "") + ": it will not expire";
      }
      await act("POST", "/api/v1/snapshots/" + encodeURIComponent(version) + "/unpin");
      return "snapshot v" + version + " unpinned: it expires with the others";
    });
    refresh();
  }

  // ---- dead letters ----
  let dlqAt = 0, dlqOpen = {};
  function dlqSection() {
    const services = $("cards").previousElementSibling; // <h2>Services</h2>
    services.insertAdjacentHTML("beforebegin", '<h2>Dead letters <span id="dlq-count" class="muted"></span></h2>' +
      '<div class="toolbar"><button id="dlq-replay-all">replay all</button><button id="dlq-purge-all" class="danger">purge all…</button>' +
      '<span class="muted">a replay sends a dead letter back to the stage it left; a purge deletes it (its rows are lost)</span></div>' +
      '<table id="dlq"><thead><tr><th class="num">seq</th><th>stage</th><th>reason</th><th>from</th><th>at</th><th class="num">bytes</th><th></th></tr></thead><tbody></tbody></table>');
    $("dlq-replay-all").onclick = e => run(e.target, "replay all dead letters", async () => {
      const rs = await act("POST", "/api/v1/dlq/replay");
      const failed = rs.filter(r => r.error);
      loadDLQ(true);
      return "replayed " + (rs.length - failed.length) + " of " + rs.length + " dead letters" + (failed.length ? "; not replayable: " + failed.map(r => r.seq + " (" + r.error + ")").join(", ") : "");
    });
    $("dlq-purge-all").onclick = e => {
      const n = $("dlq").tBodies[0].querySelectorAll("tr[data-seq]").length;
      if (!confirm("Purge every dead letter (" + n + " listed)? Their rows are lost.")) return;
      run(e.target, "purge the dead letters", async () => {
        const p = await act("POST", "/api/v1/dlq/purge");
        loadDLQ(true);
        return "purged " + p.purged + " dead letters";
      });
    };
    $("dlq").onclick = e => {
      const b = e.target.closest("button[data-op]");
      if (!b) return;
      const seq = b.closest("tr").dataset.seq;
      if (b.dataset.op === "show") {
        if (dlqOpen[seq]) { delete dlqOpen[seq]; renderDLQ(); return; }
        run(b, "show dead letter " + seq, async () => { dlqOpen[seq] = await get("/api/v1/dlq/" + seq); renderDLQ(); });
      } else if (b.dataset.op === "replay") {
        run(b, "replay dead letter " + seq, async () => {
          const r = await act("POST", "/api/v1/dlq/" + seq + "/replay");
          delete dlqOpen[seq];
          loadDLQ(true);
          return "dead letter " + seq + " replayed to " + r.subject + " (" + r.stream + " " + r.new_seq + (r.duplicate ? ", already there" : "") + ")";
        });
      } else if (b.dataset.op === "purge") {
        if (!confirm("Purge dead letter " + seq + "? Its rows are lost.")) return;
        run(b, "purge dead letter " + seq, async () => {
          await act("DELETE", "/api/v1/dlq/" + seq);
          delete dlqOpen[seq];
          loadDLQ(true);
          return "dead letter " + seq + " purged";
        });
      }
    };
  }
  let dlqList = [];
  function renderDLQ() {
    $("dlq-count").textContent = dlqList.length ? "(" + num(dlqList.length) + ")" : "";
    $("dlq").tBodies[0].innerHTML = dlqList.map(d => {
      const row = '<tr data-seq="' + esc(d.seq) + '">' + td(num(d.seq), "num") + td(esc(d.stage)) + td('<span class="bad">' + esc(d.reason) + "</span>", "err") +
        td(esc(d.orig_subject || "")) + td(esc(new Date(d.time).toLocaleString())) + td(num(d.bytes), "num") +
        td('<button data-op="show">' + (dlqOpen[d.seq] ? "hide" : "show") + '</button><button data-op="replay">replay</button><button data-op="purge" class="danger">purge…</button>', "a-btns") + "</tr>";
      const x = dlqOpen[d.seq];
      if (!x) return row;
      const hdrs = Object.keys(x.headers || {}).sort().map(k => k + ": " + x.headers[k].join(", ")).join("\n");
      const body = x.body ? (x.body.error ? "body: not decodable: " + x.body.error : "body: " + x.body.rows + " rows; " +
        (x.body.fields || []).map(f => f.name + " " + f.type).join(", ")) : x.body_omitted ? "body omitted (" + x.body_omitted + " bytes, kept at " + x.orig_stream + " " + x.orig_seq + ")" : "no body";
      return row + '<tr class="a-detail"><td colspan="7">' + esc(hdrs + "\n" + body) + "</td></tr>";
    }).join("") || '<tr><td colspan="7" class="muted">no dead letters</td></tr>';
  }
  async function loadDLQ(now) {
    if (!now && Date.now() - dlqAt < 5000) return;
    dlqAt = Date.now();
    try {
      dlqList = await get("/api/v1/dlq?limit=100");
      renderDLQ();
    } catch (e) {
      $("dlq").tBodies[0].innerHTML = '<tr><td colspan="7" class="muted">' + esc(e.message) + "</td></tr>";
    }
  }

  // ---- the overview: halted tables, snapshots, dead letters ----
  function overview() {
    dlqSection();
    $("halts").addEventListener("click", e => {
      const b = e.target.closest("button[data-resync]");
      if (b) resync(b, b.dataset.resync, "");
    });
    $("snaps").addEventListener("click", e => {
      const b = e.target.closest("button[data-pin]");
      if (b) pin(b, b.dataset.pin, b.dataset.on === "true", "");
    });
    document.addEventListener("sluice:summary", e => {
      const s = e.detail || {};
      // A halted table's row gets the button that runs its recovery.
      for (const row of document.querySelectorAll("#halts .prog.halted[data-table]")) {
        if (!row.querySelector("button")) row.lastElementChild.insertAdjacentHTML("beforeend", ' <button data-resync="' + esc(row.dataset.table) + '">resync now</button>');
      }
      // Each snapshot row gets its pin or unpin.
      const snaps = s.snapshots || [];
      const head = $("snaps").tHead.rows[0];
      if (head.cells.length === 4) head.insertAdjacentHTML("beforeend", "<th>pin</th>");
      const rows = $("snaps").tBodies[0].rows;
      snaps.forEach((x, i) => {
        const tr = rows[i];
        if (!tr || tr.cells.length !== 4) return;
        tr.insertAdjacentHTML("beforeend", '<td class="a-btns">' + (x.pinned ? '<span class="pin" title="' + esc(x.pin_reason || "") + '">pinned</span>' : "") +
          '<button data-pin="' + esc(x.version) + '" data-on="' + !x.pinned + '">' + (x.pinned ? "unpin" : "pin") + "</button></td>");
      });
      loadDLQ(false);
    });
  }

  // ---- one destination: lifecycle, purge, resync, pins ----
  let life = "active", watching = null;
  function destination() {
    $("d-state").insertAdjacentHTML("afterend", '<h2>Actions</h2><div class="a-panel" id="d-actions">' +
      '<div class="toolbar"><span class="lbl">lifecycle</span> <span id="a-life"></span>' +
      '<button data-life="pause">pause</button><button data-life="resume">resume</button><button data-life="drain">drain</button>' +
      '<button id="a-retire" class="danger">retire…</button><button id="a-purge" class="danger">purge…</button></div>' +
      '<div id="a-confirm" class="a-confirm hidden"><span id="a-confirm-what"></span> Type <b>' + esc(DEST) + '</b> to confirm: ' +
      '<input id="a-confirm-name" autocomplete="off"> <button id="a-confirm-go" class="danger" disabled></button> <button id="a-confirm-cancel">cancel</button></div>' +
      '<div id="a-purge-status" class="muted"></div>' +
      '<div class="toolbar"><span class="lbl">resync</span> <select id="a-table"></select>' +
      '<button id="a-resync-dest">resync this destination\'s rows</button><button id="a-resync-table">resync the whole table</button></div>' +
      '<div id="a-progress"></div>' +
      '<div class="toolbar"><span class="lbl">snapshot</span> <span id="a-snap"></span> <input id="a-pin-reason" placeholder="reason (optional)">' +
      '<button id="a-pin">pin</button><button id="a-unpin">unpin</button></div></div>');
    for (const b of document.querySelectorAll("#d-actions button[data-life]")) {
      b.onclick = () => lifecycle(b, b.dataset.life);
    }
    let confirmed = null;
    const ask = (what, label, f) => {
      $("a-confirm-what").textContent = what;
      $("a-confirm-go").textContent = label;
      $("a-confirm-name").value = "";
      $("a-confirm-go").disabled = true;
      $("a-confirm").classList.remove("hidden");
      $("a-confirm-name").focus();
      confirmed = f;
    };
    const close = () => { $("a-confirm").classList.add("hidden"); confirmed = null; };
    $("a-confirm-name").oninput = () => { $("a-confirm-go").disabled = $("a-confirm-name").value !== DEST; };
    $("a-confirm-cancel").onclick = close;
    $("a-confirm-go").onclick = () => {
      if ($("a-confirm-name").value !== DEST || !confirmed) return;
      const f = confirmed;
      close();
      f();
    };
    $("a-retire").onclick = () => ask("Retire " + DEST + ": the router drops its rows from now on, and no one can bring it back.", "retire " + DEST,
      () => lifecycle($("a-retire"), "retire"));
    $("a-purge").onclick = () => ask("Purge " + DEST + ": its rows are removed from every pack and catalog table (it must be retired first).", "purge " + DEST,
      () => purge($("a-purge")));
    $("a-resync-dest").onclick = e => resync(e.target, $("a-table").value, DEST);
    $("a-resync-table").onclick = e => resync(e.target, $("a-table").value, "");
    $("a-pin").onclick = e => pin(e.target, $("d-snap").value, true, $("a-pin-reason").value.trim());
    $("a-unpin").onclick = e => pin(e.target, $("d-snap").value, false, "");
    document.addEventListener("sluice:refresh", () => { loadLife(); loadTables(); snapLine(); });
    loadLife(); watchResyncs(); purgeStatus(false);
  }
  async function lifecycle(btn, action) {
    await run(btn, action + " " + DEST, async () => {
      const c = await act("POST", "/api/v1/destinations/" + encodeURIComponent(DEST) + "/" + action);
      await loadLife();
      refresh();
      return c.destination + ": " + c.from + " → " + c.to;
    });
  }
  async function loadLife() {
    try {
      const rows = await get("/api/v1/destinations/states?destination=" + encodeURIComponent(DEST));
      const row = rows.find(r => r.destination === DEST);
      life = row ? row.state : "active";
      $("a-life").innerHTML = badge(life) + (row && row.reason ? ' <span class="muted">' + esc(row.reason) + "</span>" : "") + " ";
    } catch (e) {
      $("a-life").innerHTML = '<span class="muted">' + esc(e.message) + "</span> ";
    }
    // Retired is final: nothing but the purge is left.
    for (const b of document.querySelectorAll("#d-actions button[data-life], #a-retire")) b.disabled = life === "retired";
  }
  async function purge(btn) {
    await run(btn, "purge " + DEST, async () => {
      const st = await act("POST", "/api/v1/destinations/" + encodeURIComponent(DEST) + "/purge");
      showPurge(st);
      purgeStatus(true);
      return "purge of " + DEST + " requested: the publisher runs it on its next tick";
    });
  }
  function showPurge(st) {
    if (!st || !st.request) { $("a-purge-status").innerHTML = ""; return; }
    $("a-purge-status").innerHTML = "purge: <b>" + esc(st.request) + "</b>" +
      (st.message ? ' <span class="bad">' + esc(st.message) + "</span>" : "") +
      (st.request === "done" ? (st.remains || []).map(r => "<br>remains: " + esc(r.what) + (r.count ? " (" + num(r.count) + ")" : "") + " — " + esc(r.how)).join("") : "");
    $("a-purge-status").dataset.request = st.request;
  }
  async function purgeStatus(poll) {
    for (let i = 0; i < 120; i++) {
      try {
        const st = await get("/api/v1/destinations/" + encodeURIComponent(DEST) + "/purge");
        showPurge(st);
        if (!poll || st.request === "done" || st.request === "failed") return;
      } catch (e) {
        return;
      }
      await new Promise(r => setTimeout(r, 1000));
    }
  }
  // The resync select offers the tables this destination has at the
  // shown snapshot, and every table the reader streams.
  let readerTables = [];
  async function loadTables() {
    if (!readerTables.length) {
      try {
        const s = await get("/api/v1/status/summary");
        const r = (s.services || {}).reader || {};
        readerTables = Object.keys(Object.assign({}, r.rows || {}, r.halted_tables || {}, r.resyncs || {}));
      } catch (e) { /* the destination's own tables remain */ }
    }
    const have = Array.from($("d-table").options).map(o => o.value);
    const all = Array.from(new Set(have.concat(readerTables))).sort();
    const cur = $("a-table").value || $("d-table").value;
    if (all.join() !== Array.from($("a-table").options).map(o => o.value).join()) {
      $("a-table").innerHTML = all.map(t => '<option value="' + esc(t) + '">' + esc(t) + "</option>").join("");
    }
    if (cur && all.includes(cur)) $("a-table").value = cur;
    $("a-resync-dest").disabled = $("a-resync-table").disabled = !all.length;
  }
  function snapLine() {
    const v = $("d-snap").value;
    $("a-snap").textContent = v ? "v" + v : "none yet";
    $("a-pin").disabled = $("a-unpin").disabled = !v;
  }
  // The resyncs of this destination and of its tables as a whole, as
  // progress bars (ui.html's renderProgress), polled while one runs.
  async function loadResyncs() {
    const list = await get("/api/v1/resyncs?limit=50");
    const mine = list.filter(r => r.destination === DEST || !r.destination).slice(0, 5);
    renderProgress(mine.map(r => ({kind: "resync", table: r.table, id: r.id, rows: r.rows_copied, estimated_rows: r.estimated_rows,
      chunks: r.chunks, done: r.state === "done"})), $("a-progress"));
    const bars = $("a-progress").querySelectorAll(".prog");
    mine.forEach((r, i) => {
      const b = bars[i];
      if (!b) return;
      b.dataset.state = r.state;
      b.dataset.scope = r.destination ? "destination" : "table";
      b.firstElementChild.insertAdjacentHTML("beforeend", ' <span class="muted">' + (r.destination ? "this destination" : "every destination") + " · " + esc(r.state) + "</span>" +
        (r.error ? ' <span class="bad">' + esc(r.error) + "</span>" : ""));
    });
    if (!mine.length) $("a-progress").innerHTML = '<span class="muted">no resync of this destination yet</span>';
    return mine.some(r => r.state === "queued" || r.state === "running");
  }
  function watchResyncs() {
    if (!DEST || watching) return;
    const tick = async () => {
      let active = false;
      try { active = await loadResyncs(); } catch (e) { $("a-progress").innerHTML = '<span class="muted">' + esc(e.message) + "</span>"; }
      watching = active ? setTimeout(tick, 1000) : null;
    };
    watching = setTimeout(tick, 0);
  }

  if (DEST) destination(); else overview();
})();
