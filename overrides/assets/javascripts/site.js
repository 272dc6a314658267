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

// Diagram text stays readable. Mermaid scales each drawing to the column (useMaxWidth),
// which leaves a wide sequence diagram with 3-4 px text on a phone. Material draws each
// diagram into a closed shadow root of a div.mermaid; the roots are noted here as they
// are made (this script runs before any diagram is drawn), and once a drawing is in,
// its SVG gets a minimum width at which its smallest text is still 10.5 px. Narrower
// than that, the diagram's box (.mermaid, site.css) scrolls instead of shrinking it.
(function () {
  "use strict";
  var MIN_TEXT_PX = 10.5;
  var roots = [];
  var attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    var root = attach.call(this, init);
    if (this.classList && this.classList.contains("mermaid")) {
      roots.push(root);
      new MutationObserver(function () { keepReadable(root); })
        .observe(root, { childList: true, subtree: true });
    }
    return root;
  };
  function keepReadable(root) {
    var svg = root.querySelector("svg");
    var box = svg && svg.viewBox && svg.viewBox.baseVal;
    if (!box || !box.width || svg.dataset.steadyloopReadable) {
      return;
    }
    var smallest = Infinity;
    svg.querySelectorAll("text, tspan, foreignObject span, foreignObject div, foreignObject p")
      .forEach(function (t) {
        if ((t.textContent || "").trim()) {
          var size = parseFloat(getComputedStyle(t).fontSize);
          if (size) { smallest = Math.min(smallest, size); }
        }
      });
    if (smallest === Infinity) {
      return;
    }
    svg.dataset.steadyloopReadable = "1";
    var width = Math.min(box.width, Math.ceil(box.width * MIN_TEXT_PX / smallest));
    svg.style.minWidth = width + "px";
  }
})();
