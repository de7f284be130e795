// whilly dashboard: live updates without a framework. The page follows the event stream
// (server-sent events, the session cookie authenticates it); events only say what
// changed, and the page fetches the fresh HTML of those rows from the server, at most
// once per quarter second however many events arrive.
"use strict";
(function () {
  const body = document.body;
  const stats = { events: 0, fetches: 0, applied: 0 };
  window.whillyLive = stats;

  document.addEventListener("submit", function (e) {
    const msg = e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) e.preventDefault();
  });

  const stream = body.dataset.stream;
  if (!stream || !window.EventSource) return;
  const live = body.dataset.live || "";
  const badge = document.getElementById("live");
  const eventsTable = document.getElementById("events");
  const dirty = new Set();
  let timer = null, busy = false, changed = false;

  function schedule() {
    if (timer === null && !busy) timer = setTimeout(flush, 250);
  }

  function fresh(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  async function flush() {
    timer = null;
    if (!changed) return;
    changed = false;
    const onPlan = live.endsWith("/live") && live.startsWith("/plans/");
    const key = onPlan ? "task" : "plan";
    const q = new URLSearchParams();
    for (const id of Array.from(dirty).slice(0, 500)) { q.append(key, id); dirty.delete(id); }
    busy = true;
    try {
      stats.fetches++;
      const res = await fetch(live + "?" + q.toString(), { headers: { Accept: "application/json" }, cache: "no-store" });
      if (res.redirected || !res.ok) { if (res.status === 401 || res.redirected) window.location.reload(); return; }
      const ans = await res.json();
      if (ans.summary) {
        const old = document.getElementById("summary");
        const node = fresh(ans.summary);
        // Keep what the user is typing into the budget field.
        const typing = old && old.querySelector("input[name=budget_usd]");
        if (old && !(typing && document.activeElement === typing)) old.replaceWith(node);
      }
      for (const [id, html] of Object.entries(ans.rows || {})) {
        const node = fresh(html);
        const old = document.getElementById((onPlan ? "task-" : "plan-") + id);
        if (old) {
          const tid = old.querySelector(".tid"), ntid = node.querySelector(".tid");
          if (tid && ntid) ntid.className = tid.className; // its place in the graph stays
          if (old.outerHTML !== node.outerHTML) { node.classList.add("flash"); setTimeout(() => node.classList.remove("flash"), 1200); }
          old.replaceWith(node);
        } else if (!onPlan) {
          const tbody = document.querySelector("#plans tbody");
          if (tbody) tbody.prepend(node);
        }
        stats.applied++;
      }
    } catch (err) {
      // The next event retries; nothing to show the user.
    } finally {
      busy = false;
      if (dirty.size > 0) { changed = true; schedule(); } else if (changed) schedule();
    }
  }

  function cell(label, content) {
    const td = document.createElement("td");
    td.setAttribute("data-label", label);
    if (content instanceof Node) td.appendChild(content); else td.textContent = content;
    return td;
  }

  function link(href, text) {
    const a = document.createElement("a");
    a.href = href; a.textContent = text;
    return a;
  }

  function planPath(id) { return "/plans/" + encodeURIComponent(id); }

  function addEventRow(ev) {
    const f = eventsTable.dataset;
    if ((f.task && ev.task_id !== f.task) || (f.type && ev.type !== f.type) || (f.plan && ev.plan_id !== f.plan)) return;
    const tbody = eventsTable.tBodies[0];
    const none = tbody.querySelector("tr.none");
    if (none) none.remove();
    const tr = document.createElement("tr");
    tr.appendChild(cell("Id", String(ev.id))).className = "num";
    tr.appendChild(cell("Time", (ev.created_at || "").replace("T", " ").replace(/\.\d+/, "")));
    const code = document.createElement("code"); code.textContent = ev.type;
    tr.appendChild(cell("Type", code));
    const where = document.createElement("span");
    if (ev.plan_id) where.appendChild(link(planPath(ev.plan_id), ev.plan_id));
    if (ev.task_id) { where.append(" / "); where.appendChild(link(planPath(ev.plan_id) + "#task-" + ev.task_id, ev.task_id)); }
    tr.appendChild(cell("Plan / task", where));
    const p = document.createElement("code"); p.className = "payload";
    const text = JSON.stringify(ev.payload || {});
    p.textContent = text.length > 300 ? text.slice(0, 300) + "…" : text;
    tr.appendChild(cell("Payload", p));
    tbody.prepend(tr);
    while (tbody.rows.length > 500) tbody.deleteRow(tbody.rows.length - 1);
  }

  const es = new EventSource(stream);
  es.onopen = function () { if (badge) badge.classList.add("on"); };
  es.onerror = function () { if (badge) badge.classList.remove("on"); };
  es.onmessage = function (m) {
    let ev;
    try { ev = JSON.parse(m.data); } catch (e) { return; }
    stats.events++;
    if (eventsTable) { addEventRow(ev); return; }
    if (!live) return;
    if (live.startsWith("/plans/")) {
      if (ev.task_id) dirty.add(ev.task_id);
      changed = true; // the summary is fetched with any task
      schedule();
    } else if (ev.plan_id) {
      dirty.add(ev.plan_id);
      changed = true;
      schedule();
    }
  };
})();
