// The docs' script (dflash_nb.js). First the search box: it reads window.DN_INDEX (search_index.js) and ranks
// the entries; `/` focuses it, arrows move, Enter opens, Escape clears; index.html?q=words searches on load.
(function () {
  var index = window.DN_INDEX || [], q = document.getElementById('dn-q'), box = document.getElementById('dn-hits');
  var hits = [], sel = 0;   // an entry: [text, page, anchor, kind, snippet, page title]
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return '&#' + c.charCodeAt(0) + ';'; }); }
  function score(e, w) {
    var t = e[0].toLowerCase(), s = t === w ? 100 : t.indexOf(w) === 0 ? 60 : t.indexOf(w) >= 0 ? 30 :
      (e[4] + ' ' + e[5]).toLowerCase().indexOf(w) >= 0 ? 5 : 0;
    return s && s + (e[3] === 'api' ? 8 : e[3] === 'page' ? 6 : 0);
  }
  function search(v) {   // every word must match; the best 25
    var words = v.toLowerCase().split(/\s+/).filter(Boolean), out = [];
    index.forEach(function (e) {
      var total = 0;
      for (var i = 0; i < words.length; i++) { var s = score(e, words[i]); if (!s) return; total += s; }
      if (words.length) out.push([total, e]);
    });
    return out.sort(function (a, b) { return b[0] - a[0]; }).slice(0, 25).map(function (x) { return x[1]; });
  }
  function item(e, i) {
    var name = e[3] === 'api' ? '<code>' + esc(e[0]) + '</code>' : '<b>' + esc(e[0]) + '</b>';
    return '<li><a href="' + e[1] + (e[2] ? '#' + e[2] : '') + '"' + (i ? '' : ' class="sel"') + '>' +
      '<span class="k">' + esc(e[3] === 'page' ? 'page' : e[5]) + '</span>' + name + '<small>' + esc(e[4]) +
      '</small></a></li>';
  }
  function show(v) {
    hits = search(v); sel = 0; box.hidden = !v.trim();
    if (!box.hidden) box.innerHTML = hits.length ? hits.map(item).join('') : '<li><small>no match</small></li>';
  }
  function move(d) {
    sel = (sel + d + hits.length) % hits.length;
    [].forEach.call(box.querySelectorAll('a'), function (a, i) { a.className = i === sel ? 'sel' : ''; });
  }
  if (q) {
    q.addEventListener('input', function () { show(q.value); });
    q.addEventListener('keydown', function (ev) {
      if (ev.key === 'ArrowDown' && hits.length) { move(1); ev.preventDefault(); }
      else if (ev.key === 'ArrowUp' && hits.length) { move(-1); ev.preventDefault(); }
      else if (ev.key === 'Enter' && hits.length) location.href = box.querySelectorAll('a')[sel].getAttribute('href');
      else if (ev.key === 'Escape') { q.value = ''; show(''); }
    });
    document.addEventListener('keydown', function (ev) {
      if (ev.key === '/' && document.activeElement !== q) { q.focus(); ev.preventDefault(); }
    });
    var m = location.search.match(/[?&]q=([^&]*)/);   // index.html?q=words searches on load
    if (m) { q.value = decodeURIComponent(m[1].replace(/\+/g, ' ')); show(q.value); }
  }
})();
// Then the table of contents marks the section being read as the page scrolls.
(function () {
  var links = [].slice.call(document.querySelectorAll('.dn-toc a'));
  function spy() {
    var cur = null;
    links.forEach(function (a) {
      var h = document.getElementById(decodeURIComponent(a.hash.slice(1)));
      if (h && h.getBoundingClientRect().top < 120) cur = a;
    });
    links.forEach(function (a) { a.style.fontWeight = a === cur ? '600' : ''; });
  }
  if (links.length) { window.addEventListener('scroll', spy, {passive: true}); spy(); }
})();
