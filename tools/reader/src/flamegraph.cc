#include "flamegraph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "files.h"

namespace mmap3 {
namespace {

constexpr double kPad = 10;          // left and right margin
constexpr double kFrameHeight = 16;  // one level
constexpr double kTop = 56;          // title, subtitle, buttons
constexpr double kCharWidth = 7.2;   // 12px monospace, for fitting labels
constexpr double kLegendRow = 18;
constexpr size_t kLegendEntries = 12;
constexpr int kLegendColumns = 3;

// Printable UTF-8 (no control characters, no invalid bytes: files.h), with
// XML's special characters escaped: character data and attribute values.
std::string Xml(std::string_view text) {
  const std::string printable = PrintableUtf8(text);
  std::string out;
  out.reserve(printable.size());
  for (char c : printable) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Num(double v) { return fmt::format("{:.2f}", v); }

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return base.empty() ? path : base;
}

uint64_t Fnv1a(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Rgb {
  int r = 0, g = 0, b = 0;
  std::string Css() const { return fmt::format("rgb({},{},{})", r, g, b); }
};

// HSL (hue in degrees, saturation and lightness in percent) to RGB.
Rgb FromHsl(int hue, int saturation, int lightness) {
  const double s = saturation / 100.0, l = lightness / 100.0;
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double hp = (hue % 360) / 60.0;
  const double x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (hp < 1) {
    r = c, g = x;
  } else if (hp < 2) {
    r = x, g = c;
  } else if (hp < 3) {
    g = c, b = x;
  } else if (hp < 4) {
    g = x, b = c;
  } else if (hp < 5) {
    r = x, b = c;
  } else {
    r = c, b = x;
  }
  const double m = l - c / 2;
  auto byte = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 1.0) * 255)); };
  return {byte(r + m), byte(g + m), byte(b + m)};
}

// What a frame is: the root, a command, or a location of a file.
struct FrameKey {
  enum Kind : uint8_t { kRoot, kComm, kLocation };
  std::string label;
  Kind kind = kLocation;
  std::string path;  // kLocation: the file ("" in no mapping)
  BuildId build_id;
  BuildIdSource source = BuildIdSource::kNone;
  auto Tie() const { return std::tie(label, kind, path, build_id, source); }
  bool operator<(const FrameKey& o) const { return Tie() < o.Tie(); }
};

struct Node {
  FrameKey key;
  uint64_t samples = 0;
  std::map<FrameKey, std::unique_ptr<Node>> children;  // in label order
};

// "[libe2e.so a2a111111111]", "[libfoo.so]", "[anon perf-map]".
std::string FileTag(const FrameMapping& m) {
  std::string tag = BaseName(m.path);
  if (!m.build_id.empty()) {
    tag += " " + m.build_id.ShortHex();
    if (m.source == BuildIdSource::kPerfHeader) tag += " unverified";
  } else if (m.source == BuildIdSource::kPerfMap) {
    tag += " perf-map";
  }
  return "[" + tag + "]";
}

FrameKey LocationKey(const ReportModel& m, uint32_t index) {
  const FrameLocation& l = m.frame_locations[index];
  FrameKey key;
  if (l.mapping == 0 || l.mapping > m.frame_mappings.size()) {
    key.label = l.symbol;
    return key;
  }
  const FrameMapping& fm = m.frame_mappings[l.mapping - 1];
  key.label = l.symbol + " " + FileTag(fm);
  key.path = fm.path;
  key.build_id = fm.build_id;
  key.source = fm.source;
  return key;
}

// Colours by build-id (see flamegraph.h).
class Palette {
 public:
  // Every file that will be drawn, before the first Of().
  void Add(const FrameKey& k) {
    if (k.kind == FrameKey::kLocation && !k.build_id.empty()) ids_.emplace(k.build_id, BaseName(k.path));
  }
  void Assign() {
    // In build-id order: the result depends on the set of files only.
    std::map<std::string, std::vector<int>> hues_of_name;
    for (const auto& [id, name] : ids_) {
      const uint64_t h = Fnv1a(id.Hex());
      int hue = static_cast<int>(h % 360);
      std::vector<int>& taken = hues_of_name[name];
      // Another version of the same file: keep them apart.
      for (int tries = 0; tries < 14 && Near(taken, hue); ++tries) hue = (hue + 47) % 360;
      taken.push_back(hue);
      colours_[id] = FromHsl(hue, 55 + static_cast<int>((h >> 20) % 26),
                             58 + static_cast<int>((h >> 32) % 14));
    }
  }
  Rgb Of(const FrameKey& k) const {
    switch (k.kind) {
      case FrameKey::kRoot: return {210, 210, 210};
      case FrameKey::kComm: return {190, 200, 215};
      case FrameKey::kLocation: break;
    }
    if (!k.build_id.empty()) {
      auto it = colours_.find(k.build_id);
      if (it != colours_.end()) return it->second;
    }
    if (k.path.empty()) return {180, 180, 180};  // in no mapping
    // No build-id: grey, with a pale tint from the path.
    const uint64_t h = Fnv1a(k.path);
    return FromHsl(static_cast<int>(h % 360), 12, 72);
  }

 private:
  static bool Near(const std::vector<int>& hues, int hue) {
    for (int t : hues) {
      const int d = std::abs(t - hue);
      if (std::min(d, 360 - d) < 25) return true;
    }
    return false;
  }
  std::map<BuildId, std::string> ids_;
  std::map<BuildId, Rgb> colours_;
};

class Renderer {
 public:
  Renderer(const ReportModel& m, const FlamegraphOptions& o) : m_(m), o_(o) {}

  std::string Render() {
    Build();
    depth_ = Depth(root_, 0);
    const double frames_bottom = kTop + (depth_ + 1) * kFrameHeight;
    const size_t legend = std::min(files_.size(), kLegendEntries);
    const double legend_top = frames_bottom + 12;
    const double legend_rows = std::ceil(static_cast<double>(legend) / kLegendColumns);
    height_ = legend_top + legend_rows * kLegendRow + 34;
    Header();
    out_ += "<g id=\"frames\">\n";
    if (root_.samples != 0) Draw(root_, 0, 0);
    out_ += "</g>\n";
    Legend(legend, legend_top);
    Footer();
    return std::move(out_);
  }

 private:
  void Build() {
    root_.key.kind = FrameKey::kRoot;
    root_.key.label = "all";
    const bool chains = m_.callchains;
    for (const FrameStack& s : m_.frame_stacks) {
      if (s.locations.empty()) continue;
      std::vector<FrameKey> path;
      if (chains) {
        FrameKey comm;
        comm.kind = FrameKey::kComm;
        comm.label = s.comm;
        path.push_back(std::move(comm));
        for (auto it = s.locations.rbegin(); it != s.locations.rend(); ++it)
          path.push_back(LocationKey(m_, *it));
      } else {
        path.push_back(LocationKey(m_, s.locations.front()));  // the leaf
      }
      Node* node = &root_;
      node->samples += s.samples;
      for (FrameKey& k : path) {
        palette_.Add(k);
        auto& child = node->children[k];
        if (!child) {
          child = std::make_unique<Node>();
          child->key = std::move(k);
        }
        node = child.get();
        node->samples += s.samples;
      }
      // The legend: each file's samples as the leaf.
      const FrameKey& leaf = node->key;
      if (leaf.kind == FrameKey::kLocation && !leaf.path.empty())
        files_by_key_[{leaf.path, leaf.build_id, leaf.source}] += s.samples;
    }
    palette_.Assign();
    for (const auto& [file, samples] : files_by_key_) files_.push_back({samples, file});
    std::stable_sort(files_.begin(), files_.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
  }

  int Depth(const Node& n, int d) const {
    int deepest = d;
    for (const auto& [key, child] : n.children) deepest = std::max(deepest, Depth(*child, d + 1));
    return deepest;
  }

  double Scale() const { return (o_.width - 2 * kPad) / static_cast<double>(root_.samples); }

  void Header() {
    const std::string title =
        m_.callchains ? o_.title : o_.title + " (flat profile: the capture has no call chains)";
    std::string sub = fmt::format("{} samples", m_.matched_samples);
    if (m_.controls.Filters())
      sub = fmt::format("{} of {} samples (filters {})", m_.matched_samples, m_.samples,
                        m_.controls.FilterText());
    if (!m_.event.name.empty()) sub += fmt::format(" of {}", m_.event.name == "cpu" ? "cpu-clock" : m_.event.name);
    sub += fmt::format(", mode {}", m_.mode);
    sub += m_.callchains ? "; call chains, outermost at the bottom; click to zoom"
                         : "; leaf functions only, one level: record -g for call chains";
    const double mid = o_.width / 2;
    out_ += "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n";
    out_ += fmt::format(
        "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
        "viewBox=\"0 0 {} {}\">\n",
        Num(o_.width), Num(height_), Num(o_.width), Num(height_));
    out_ += "<style type=\"text/css\"><![CDATA[\n"
            "text { font-family: monospace; font-size: 12px; fill: rgb(0,0,0); }\n"
            "#title { font-size: 17px; }\n"
            ".button { fill: rgb(0,0,160); cursor: pointer; }\n"
            ".hidden { display: none; }\n"
            "#frames g { cursor: pointer; }\n"
            "#frames g:hover rect { stroke: rgb(0,0,0); stroke-width: 0.5; }\n"
            "#frames text { pointer-events: none; }\n"
            "]]></style>\n";
    out_ += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"rgb(250,250,250)\"/>\n",
                        Num(o_.width), Num(height_));
    out_ += fmt::format("<text id=\"title\" x=\"{}\" y=\"22\" text-anchor=\"middle\">{}</text>\n",
                        Num(mid), Xml(title));
    out_ += fmt::format("<text id=\"subtitle\" x=\"{}\" y=\"40\" text-anchor=\"middle\">{}</text>\n",
                        Num(mid), Xml(sub));
    out_ += fmt::format("<text id=\"unzoom\" class=\"button hidden\" x=\"{}\" y=\"22\">Reset zoom</text>\n",
                        Num(kPad));
    out_ += fmt::format(
        "<text id=\"search\" class=\"button\" x=\"{}\" y=\"22\" text-anchor=\"end\">Search</text>\n",
        Num(o_.width - kPad));
  }

  // `offset`: samples to the left of this frame within the root.
  void Draw(const Node& n, int depth, uint64_t offset) {
    const double x = kPad + static_cast<double>(offset) * Scale();
    const double w = static_cast<double>(n.samples) * Scale();
    if (w < o_.min_frame_width) {
      omitted_ += Count(n);
      return;
    }
    const double y = kTop + (depth_ - depth) * kFrameHeight;
    const double percent =
        m_.matched_samples ? 100.0 * static_cast<double>(n.samples) / static_cast<double>(m_.matched_samples)
                           : 0.0;
    out_ += fmt::format("<g data-depth=\"{}\" data-samples=\"{}\"><title>{}\n{} sample{}, {}%</title>",
                        depth, n.samples, Xml(n.key.label), n.samples, n.samples == 1 ? "" : "s",
                        Num(percent));
    out_ += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"2\" ry=\"2\" fill=\"{}\"/>", Num(x),
        Num(y), Num(w), Num(kFrameHeight - 1), palette_.Of(n.key).Css());
    out_ += fmt::format("<text x=\"{}\" y=\"{}\">{}</text></g>\n", Num(x + 3), Num(y + 11.5),
                        Xml(Fit(n.key.label, w)));
    uint64_t at = offset;
    for (const auto& [key, child] : n.children) {
      Draw(*child, depth + 1, at);
      at += child->samples;
    }
  }

  static uint64_t Count(const Node& n) {
    uint64_t c = 1;
    for (const auto& [key, child] : n.children) c += Count(*child);
    return c;
  }

  // The label as far as it fits in `w` pixels (the script does the same
  // when zooming); whole characters, not bytes.
  static std::string Fit(const std::string& label, double w) {
    const std::string printable = PrintableUtf8(label);
    const auto fits = static_cast<long>(std::floor((w - 6) / kCharWidth));
    if (fits < 3) return "";
    std::vector<size_t> starts;  // of each UTF-8 character
    for (size_t i = 0; i < printable.size(); ++i)
      if ((static_cast<unsigned char>(printable[i]) & 0xc0) != 0x80) starts.push_back(i);
    if (static_cast<long>(starts.size()) <= fits) return printable;
    return printable.substr(0, starts[static_cast<size_t>(fits - 2)]) + "..";
  }

  void Legend(size_t entries, double top) {
    out_ += "<g id=\"legend\">\n";
    const double column = (o_.width - 2 * kPad) / kLegendColumns;
    for (size_t i = 0; i < entries; ++i) {
      const auto& [samples, file] = files_[i];
      FrameKey k;
      std::tie(k.path, k.build_id, k.source) = file;
      const double x = kPad + static_cast<double>(i % kLegendColumns) * column;
      const double y = top + static_cast<double>(i / kLegendColumns) * kLegendRow;
      FrameMapping fm;
      fm.path = k.path;
      fm.build_id = k.build_id;
      fm.source = k.source;
      std::string tag = FileTag(fm);
      tag = fmt::format("{}: {}", tag.substr(1, tag.size() - 2), samples);
      out_ += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" "
          "y=\"{}\"><title>{}</title>{}</text>\n",
          Num(x), Num(y), palette_.Of(k).Css(), Num(x + 16), Num(y + 10.5), Xml(tag),
          Xml(Fit(tag, column - 24)));
    }
    out_ += "</g>\n";
    std::string note = "Colours: one per build-id.  Legend: files by samples in their code (leaf frames). ";
    if (files_.size() > entries)
      note += fmt::format("{} more files not in the legend. ", files_.size() - entries);
    if (omitted_ != 0)
      note += fmt::format("{} frames narrower than {} px not drawn.", omitted_, Num(o_.min_frame_width));
    out_ += fmt::format("<text id=\"note\" x=\"{}\" y=\"{}\">{}</text>\n", Num(kPad),
                        Num(height_ - 24), Xml(note));
  }

  void Footer() {
    out_ += fmt::format("<text id=\"details\" x=\"{}\" y=\"{}\"> </text>\n", Num(kPad), Num(height_ - 8));
    out_ += fmt::format(
        "<text id=\"matched\" x=\"{}\" y=\"{}\" text-anchor=\"end\"> </text>\n",
        Num(o_.width - kPad), Num(height_ - 8));
    out_ += "<script type=\"text/ecmascript\"><![CDATA[\n";
    out_ += fmt::format("var W = {}, PAD = {}, CHAR = {};\n", Num(o_.width), Num(kPad), Num(kCharWidth));
    out_ += R"JS((function () {
  var framesNode = document.getElementById("frames");
  var details = document.getElementById("details");
  var matched = document.getElementById("matched");
  var unzoom = document.getElementById("unzoom");
  var frames = [];
  var groups = framesNode.getElementsByTagName("g");
  for (var i = 0; i < groups.length; i++) {
    var g = groups[i];
    var rect = g.getElementsByTagName("rect")[0];
    var title = g.getElementsByTagName("title")[0].textContent;
    var nl = title.indexOf("\n");
    var f = {
      g: g, rect: rect, text: g.getElementsByTagName("text")[0],
      name: title.substring(0, nl), info: title.substring(0, nl) + " - " + title.substring(nl + 1),
      x: parseFloat(rect.getAttribute("x")), w: parseFloat(rect.getAttribute("width")),
      depth: parseInt(g.getAttribute("data-depth"), 10),
      samples: parseInt(g.getAttribute("data-samples"), 10),
      fill: rect.getAttribute("fill")
    };
    g.flameFrame = f;
    frames.push(f);
  }
  function fit(f, w) {
    var n = Math.floor((w - 6) / CHAR);
    if (n < 3) return "";
    var chars = Array.from ? Array.from(f.name) : f.name.split("");
    return chars.length <= n ? f.name : chars.slice(0, n - 2).join("") + "..";
  }
  function place(f, x, w) {
    f.rect.setAttribute("x", x.toFixed(2));
    f.rect.setAttribute("width", w.toFixed(2));
    f.text.setAttribute("x", (x + 3).toFixed(2));
    f.text.textContent = fit(f, w);
  }
  function frameOf(node) {
    while (node && node !== framesNode) {
      if (node.flameFrame) return node.flameFrame;
      node = node.parentNode;
    }
    return null;
  }
  var eps = 0.001;
  function zoom(z) {
    var scale = (W - 2 * PAD) / z.w;
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i];
      var inside = f.depth >= z.depth && f.x >= z.x - eps && f.x + f.w <= z.x + z.w + eps;
      var under = f.depth < z.depth && f.x <= z.x + eps && f.x + f.w >= z.x + z.w - eps;
      if (inside) {
        f.g.style.display = "";
        f.g.style.opacity = "";
        place(f, PAD + (f.x - z.x) * scale, f.w * scale);
      } else if (under) {
        f.g.style.display = "";
        f.g.style.opacity = "0.6";
        place(f, PAD, W - 2 * PAD);
      } else {
        f.g.style.display = "none";
      }
    }
    unzoom.setAttribute("class", "button");
  }
  function reset() {
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i];
      f.g.style.display = "";
      f.g.style.opacity = "";
      place(f, f.x, f.w);
    }
    unzoom.setAttribute("class", "button hidden");
  }
  function search() {
    var text = window.prompt("Highlight the frames whose label matches (regular expression):", "");
    if (text === null) return;
    var re = null;
    if (text !== "") {
      try { re = new RegExp(text); } catch (e) { matched.textContent = "not a regular expression"; return; }
    }
    var hits = [];
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i];
      var hit = re !== null && re.test(f.name);
      f.rect.setAttribute("fill", hit ? "rgb(230,0,230)" : f.fill);
      if (hit) hits.push(f);
    }
    if (re === null) { matched.textContent = " "; return; }
    // A matching frame inside another adds nothing: its samples are counted.
    hits.sort(function (a, b) { return a.x - b.x || a.depth - b.depth; });
    var total = 0, end = -1, all = frames.length ? frames[0].samples : 0;
    for (var j = 0; j < hits.length; j++) {
      if (hits[j].x + eps < end) continue;
      total += hits[j].samples;
      end = hits[j].x + hits[j].w;
    }
    matched.textContent = "matched: " + total + " samples, " +
        (all ? (100 * total / all).toFixed(2) : "0.00") + "%";
  }
  framesNode.addEventListener("mouseover", function (e) {
    var f = frameOf(e.target);
    if (f) details.textContent = f.info;
  });
  framesNode.addEventListener("mouseout", function () { details.textContent = " "; });
  framesNode.addEventListener("click", function (e) {
    var f = frameOf(e.target);
    if (f) zoom(f);
  });
  unzoom.addEventListener("click", reset);
  document.getElementById("search").addEventListener("click", search);
})();
]]></script>
</svg>
)JS";
  }

  const ReportModel& m_;
  const FlamegraphOptions& o_;
  Node root_;
  Palette palette_;
  int depth_ = 0;
  double height_ = 0;
  uint64_t omitted_ = 0;
  std::map<std::tuple<std::string, BuildId, BuildIdSource>, uint64_t> files_by_key_;
  std::vector<std::pair<uint64_t, std::tuple<std::string, BuildId, BuildIdSource>>> files_;
  std::string out_;
};

}  // namespace

std::string RenderFlamegraph(const ReportModel& model, const FlamegraphOptions& options) {
  return Renderer(model, options).Render();
}

}  // namespace mmap3
