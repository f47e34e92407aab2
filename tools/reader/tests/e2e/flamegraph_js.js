// Runs the script of a flame graph SVG (report --format flamegraph) against
// a small stand-in for the browser's DOM, and checks what a click, "Reset
// zoom" and "Search" do to the frames.
//
//   node flamegraph_js.js FILE.svg ZOOM_LABEL_PREFIX SEARCH_REGEXP
//
// Exits 1 with the failed checks listed.
"use strict";
const fs = require("fs");
const [file, zoomPrefix, searchText] = process.argv.slice(2);
const svg = fs.readFileSync(file, "utf8");

class El {
  constructor(tag, attrs) {
    this.tagName = tag;
    this.attrs = Object.assign({}, attrs);
    this.children = [];
    this.style = {};
    this.textContent = "";
    this.parentNode = null;
    this.listeners = {};
  }
  getAttribute(n) { return n in this.attrs ? this.attrs[n] : null; }
  setAttribute(n, v) { this.attrs[n] = String(v); }
  addEventListener(type, fn) { this.listeners[type] = fn; }
  appendChild(c) { c.parentNode = this; this.children.push(c); return c; }
  getElementsByTagName(tag) {
    const out = [];
    const walk = (e) => { for (const c of e.children) { if (c.tagName === tag) out.push(c); walk(c); } };
    walk(this);
    return out;
  }
}

const unescape = (s) => s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, "\"")
  .replace(/&apos;/g, "'").replace(/&amp;/g, "&");
const attrsOf = (s) => {
  const a = {};
  for (const m of s.matchAll(/([\w-]+)="([^"]*)"/g)) a[m[1]] = unescape(m[2]);
  return a;
};

const byId = {};
for (const m of svg.matchAll(/<text ([^>]*id="[^"]+"[^>]*)>([^<]*)<\/text>/g)) {
  const e = new El("text", attrsOf(m[1]));
  e.textContent = unescape(m[2]);
  byId[e.attrs.id] = e;
}
const frames = new El("g", { id: "frames" });
byId.frames = frames;
const frameRe = /<g (data-depth="\d+" data-samples="\d+")><title>([^<]*)<\/title><rect ([^>]*)\/><text ([^>]*)>([^<]*)<\/text><\/g>/g;
const all = [];
for (const m of svg.matchAll(frameRe)) {
  const g = frames.appendChild(new El("g", attrsOf(m[1])));
  const title = g.appendChild(new El("title", {}));
  title.textContent = unescape(m[2]);
  const rect = g.appendChild(new El("rect", attrsOf(m[3])));
  const text = g.appendChild(new El("text", attrsOf(m[4])));
  text.textContent = unescape(m[5]);
  all.push({ g, rect, text, label: title.textContent.split("\n")[0], x: rect.attrs.x,
             w: rect.attrs.width, fill: rect.attrs.fill, samples: +g.attrs["data-samples"],
             depth: +g.attrs["data-depth"] });
}
const script = svg.match(/<script type="text\/ecmascript"><!\[CDATA\[([\s\S]*?)\]\]><\/script>/)[1];
let answer = null;
const document = { getElementById: (id) => byId[id] || null };
const window = { prompt: () => answer };
new Function("document", "window", script)(document, window);

const bad = [];
const check = (ok, what) => { if (!ok) bad.push(what); };
const W = parseFloat(svg.match(/<svg [^>]*width="([0-9.]+)"/)[1]);
check(all.length > 0, "no frames");

// Click a frame: it fills the width, its callers (below it) too, faded;
// everything else is hidden.
const z = all.find((f) => f.label.startsWith(zoomPrefix));
check(z, "no frame labelled " + zoomPrefix);
if (z) {
  frames.listeners.click({ target: z.text });
  check(z.rect.attrs.x === "10.00" && z.rect.attrs.width === (W - 20).toFixed(2),
        `the zoomed frame is at ${z.rect.attrs.x}, ${z.rect.attrs.width} wide`);
  check(z.text.textContent === z.label, "its label in full: " + z.text.textContent);
  const zx = parseFloat(z.x), zw = parseFloat(z.w);
  for (const f of all) {
    const x = parseFloat(f.x), w = parseFloat(f.w);
    const inside = f.depth >= z.depth && x >= zx - 0.001 && x + w <= zx + zw + 0.001;
    const under = f.depth < z.depth && x <= zx + 0.001 && x + w >= zx + zw - 0.001;
    if (inside) {
      check(f.g.style.display !== "none", "hidden inside the zoom: " + f.label);
      const want = (10 + (x - zx) * (W - 20) / zw).toFixed(2);
      check(Math.abs(parseFloat(f.rect.attrs.x) - want) < 0.02, `${f.label}: x ${f.rect.attrs.x}, want ${want}`);
    } else if (under) {
      check(f.g.style.opacity === "0.6" && f.rect.attrs.width === (W - 20).toFixed(2),
            "a caller not shown faded across the width: " + f.label);
    } else {
      check(f.g.style.display === "none", "shown outside the zoom: " + f.label);
    }
  }
  check(byId.unzoom.attrs.class === "button", "Reset zoom not shown");
  byId.unzoom.listeners.click();
  for (const f of all) {
    check(f.g.style.display === "" && f.rect.attrs.x === f.x && f.rect.attrs.width === f.w,
          "not reset: " + f.label);
  }
  check(byId.unzoom.attrs.class === "button hidden", "Reset zoom still shown");
}

// Search: matching frames highlighted, the share counted once per sample.
answer = searchText;
byId.search.listeners.click();
const re = new RegExp(searchText);
let want = 0, end = -1;
const hits = all.filter((f) => re.test(f.label))
  .sort((a, b) => parseFloat(a.x) - parseFloat(b.x) || a.depth - b.depth);
for (const f of hits) {
  if (parseFloat(f.x) + 0.001 < end) continue;
  want += f.samples;
  end = parseFloat(f.x) + parseFloat(f.w);
}
check(hits.length > 0, "nothing matches " + searchText);
for (const f of all) {
  check(f.rect.attrs.fill === (re.test(f.label) ? "rgb(230,0,230)" : f.fill), "highlight of " + f.label);
}
check(byId.matched.textContent.startsWith(`matched: ${want} samples, `),
      `"${byId.matched.textContent}", want ${want} samples`);
const matchedText = byId.matched.textContent;
answer = "";
byId.search.listeners.click();
check(all.every((f) => f.rect.attrs.fill === f.fill), "highlights not cleared");

if (bad.length) {
  console.log("FAIL: " + bad.slice(0, 10).join("; "));
  process.exit(1);
}
console.log(`NOTE: script: zoom to ${z.label}, reset, search /${searchText}/: ${matchedText}`);
