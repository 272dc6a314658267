// The language switcher keeps the reader's place: its links get the current #anchor.
// Section ids are the same in both languages (tests/docs/test_docs_parity.py checks
// that), so the anchor leads to the same section of the other language's page.
(function () {
  "use strict";
  function keepAnchor() {
    var links = document.querySelectorAll("a.md-select__link[hreflang]");
    for (var i = 0; i < links.length; i++) {
      var link = links[i];
      var href = link.getAttribute("href").split("#")[0];
      link.setAttribute("href", href + location.hash);
    }
  }
  document.addEventListener("DOMContentLoaded", keepAnchor);
  window.addEventListener("hashchange", keepAnchor);
  // A click on a table-of-contents entry may change the hash without a hashchange
  // event reaching us first (Material scrolls itself); refresh just before leaving.
  document.addEventListener("click", function (event) {
    var target = event.target;
    var link = target && target.closest ? target.closest("a.md-select__link[hreflang]") : null;
    if (link) {
      keepAnchor();
    }
  }, true);
})();
