// precog dashboard: times in the viewer's zone (UTC on hover) and live
// parts refreshed from the server without a reload. Every number comes from
// the server's HTML; this script only swaps fragments in.
(function () {
  'use strict';
  var fmt = new Intl.DateTimeFormat(undefined, {
    year: 'numeric', month: '2-digit', day: '2-digit',
    hour: '2-digit', minute: '2-digit', second: '2-digit', timeZoneName: 'short'
  });
  function localTimes(root) {
    root.querySelectorAll('time[datetime]').forEach(function (el) {
      if (el.dataset.local) return;
      var d = new Date(el.getAttribute('datetime'));
      if (isNaN(d)) return;
      el.title = el.textContent; // UTC on hover
      el.textContent = fmt.format(d);
      el.dataset.local = '1';
    });
  }
  function live(el) {
    var url = el.getAttribute('data-live');
    var every = parseInt(el.getAttribute('data-every'), 10) || 1500;
    var busy = false;
    function tick() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(url, { credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
        .then(function (r) {
          if (r.status === 401) { window.location = '/login?next=' + encodeURIComponent(location.pathname + location.search); return null; }
          return r.ok ? r.text() : null;
        })
        .then(function (html) {
          if (html === null || html === undefined) return;
          el.innerHTML = html;
          localTimes(el);
          el.dataset.updated = String(Date.now());
        })
        .catch(function () { /* offline for a moment: the next tick retries */ })
        .then(function () { busy = false; });
    }
    setInterval(tick, every);
  }
  function start() {
    localTimes(document);
    document.querySelectorAll('[data-live]').forEach(live);
    var r = document.querySelector('[data-refresh]');
    if (r) setTimeout(function () { location.reload(); }, parseInt(r.getAttribute('data-refresh'), 10));
    document.querySelectorAll('form.filters select').forEach(function (s) {
      s.addEventListener('change', function () { s.form.submit(); });
    });
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
