// whilly dashboard, attempt page: while the attempt runs, follow its log by long-polling
// the page's feed (?after=OFFSET&wait=25; the server wakes it on NOTIFY) and append the
// new text as text — never as HTML. The page keeps at most 2 MiB of text.
"use strict";
(function () {
  const pre = document.getElementById("log");
  if (!pre || pre.dataset.running !== "true" || !pre.dataset.follow) return;
  const state = document.getElementById("log-state");
  const stats = { reads: 0, appended: 0 };
  window.whillyLog = stats;
  const limit = 2 << 20;
  let next = Number(pre.dataset.next) || 0;
  let kept = pre.textContent.length;

  function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

  function append(text) {
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.appendChild(document.createTextNode(text));
    kept += text.length;
    while (kept > limit && pre.firstChild && pre.firstChild !== pre.lastChild) {
      kept -= pre.firstChild.textContent.length;
      pre.removeChild(pre.firstChild);
    }
    const empty = document.getElementById("log-empty");
    if (empty) empty.remove();
    if (atEnd) pre.scrollTop = pre.scrollHeight;
    stats.appended += text.length;
  }

  async function follow() {
    for (;;) {
      let ans;
      try {
        stats.reads++;
        const res = await fetch(pre.dataset.follow + "?after=" + next + "&wait=25", { headers: { Accept: "application/json" }, cache: "no-store" });
        if (res.status === 401 || res.redirected) { window.location.reload(); return; }
        if (!res.ok) { await sleep(2000); continue; }
        ans = await res.json();
      } catch (err) {
        await sleep(2000);
        continue;
      }
      if (ans.text) append(ans.text);
      next = ans.next_offset;
      if (!ans.running) {
        if (state) state.textContent = "ended: the task is " + ans.task_status;
        return;
      }
    }
  }
  follow();
})();
