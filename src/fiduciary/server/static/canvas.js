// Canvases in the console: plain JavaScript, no build step.
//
// A canvas event carries a whole HTML document the run made (fiduciary/canvas.py). It is never
// put into this page: it is shown in an <iframe sandbox="allow-scripts"> (never
// allow-same-origin: the frame has an origin of its own, so no access to this page, its key,
// its storage or its cookies) whose page, GET /canvas-frame, is served under a CSP that allows
// no request at all (no fetch, image, font, form or frame from anywhere). That page holds no
// data: the document is posted to it once it has loaded, and it writes it into itself; a frame
// that navigates away is never posted to again. A pending_input (reserved: the engine does
// not emit it yet) is shown as a note that a form was asked for.
"use strict";

(() => {
  const fc = window.fiduciaryConsole;
  const { el, shown } = fc;

  function frame(event) {
    const iframe = el("iframe", {
      class: "canvas-frame",
      sandbox: "allow-scripts",
      src: "/canvas-frame",
      title: shown(event.title).text,
      referrerpolicy: "no-referrer",
      "data-testid": "canvas-frame",
    });
    let posted = false;
    iframe.addEventListener("load", () => {
      if (posted || !iframe.contentWindow) return; // only the first page loaded gets it
      posted = true;
      // "*": the sandboxed frame's origin is opaque, so it has no name to post to
      iframe.contentWindow.postMessage({ html: String(event.html) }, "*");
    });
    return el("section", { class: "canvas", "data-testid": "canvas" },
      el("div", { class: "canvas-head" },
        el("span", { class: "kind", text: `canvas · ${event.kind}` }),
        el("span", { class: "canvas-title", text: shown(event.title).text })),
      iframe);
  }

  function input(event) {
    const asked = event.prompt ? `: ${shown(event.prompt).text}` : "";
    return el("div", { class: "marker", "data-testid": "pending-input",
      text: `input ${shown(event.input_id).text} asked${asked} (this console cannot show forms yet)` });
  }

  window.fiduciaryCanvas = Object.freeze({ frame, input });
})();
