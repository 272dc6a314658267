// The language switcher keeps the reader's place: it leads to the other language's page
// at the same #anchor. Section ids are the same in both languages (the parity test in
// tests/docs/test_docs_parity.py checks that), so the anchor names the same section.
//
// Material handles a click on an alternate-language link itself and drops the anchor
// (it looks the page up in a sitemap next to the alternate URL and otherwise goes to
// that URL bare). This listener runs first (capture phase, on the document), stops
// the event there and goes to the link's page with the current anchor.
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) {
      return;
    }
    var target = event.target;
    var link = target && target.closest ? target.closest("a.md-select__link[hreflang]") : null;
    if (!link) {
      return;
    }
    event.preventDefault();
    event.stopPropagation();
    location.href = link.href.split("#")[0] + location.hash;
  }, true);
})();
