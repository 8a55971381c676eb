// MathJax settings for pymdownx.arithmatex (generic mode): $...$ and $$...$$ in the pages.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex"
  },
  // The vendored build (javascripts/mathjax/tex-svg-full.js) holds every TeX extension: a
  // page must never fetch one, nor fonts (SVG output draws glyphs as paths).
  svg: {
    fontCache: "global"
  }
};

// Typeset each page mkdocs-material shows (it can swap pages without a reload).  The SVG
// output has a font cache to clear where the CHTML output of the CDN recipe had clearCache().
document$.subscribe(() => {
  const output = MathJax.startup.output;
  if (typeof output.clearFontCache === "function") output.clearFontCache();
  if (typeof output.clearCache === "function") output.clearCache();
  MathJax.typesetClear();
  MathJax.texReset();
  MathJax.typesetPromise();
});
