#include "train/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/json_text.h"
#include "io/atomic_file.h"
#include "train/metrics_log.h"

namespace ferry {

namespace {

struct Series {
  std::string name, colour;
  std::vector<std::pair<double, double>> points;  // (step, value)
  bool dots = false;                              // few points (evaluations): marked
};

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string number(double v) {
  if (v != 0 && (std::fabs(v) < 1e-3 || std::fabs(v) >= 1e5)) return fmt::format("{:.3e}", v);
  return fmt::format("{:.4g}", v);
}

// One chart of the series over the steps, with its value range and step range written at the axes.
std::string chart(const std::string& title, const std::vector<Series>& series) {
  constexpr double kW = 640, kH = 220, kLeft = 70, kRight = 16, kTop = 28, kBottom = 30;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::string svg = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"{2}\"><text x=\"{3}\" y=\"18\" class=\"title\">{2}</text>",
      kW, kH, escape_html(title), kLeft);
  if (x0 > x1) return svg + "<text x=\"70\" y=\"110\">no data</text></svg>";
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + std::max(1e-12, std::fabs(y0) * 0.01);
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (kW - kLeft - kRight); };
  auto py = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * (kH - kTop - kBottom); };
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>"
      "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{}</text>"
      "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{}</text>"
      "<text x=\"{}\" y=\"{}\" class=\"axis\">step {}</text>"
      "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{}</text>",
      kLeft, kTop, kW - kLeft - kRight, kH - kTop - kBottom, kLeft - 6, kTop + 4, number(y1), kLeft - 6,
      kH - kBottom, number(y0), kLeft, kH - 10, number(x0), kW - kRight, kH - 10, number(x1));
  double legend = kLeft + 24 + 7.5 * static_cast<double>(title.size());  // after the title
  for (const Series& s : series) {
    if (s.points.empty()) continue;
    std::string points;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(y)) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>", s.colour,
                       points);
    if (s.dots)
      for (const auto& [x, y] : s.points)
        if (std::isfinite(y))
          svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>", px(x), py(y),
                             s.colour);
    svg += fmt::format("<text x=\"{:.0f}\" y=\"18\" fill=\"{}\" class=\"legend\">{}</text>", legend, s.colour,
                       escape_html(s.name));
    legend += 130;
  }
  return svg + "</svg>";
}

constexpr const char* kStyle =
    "body{font:14px system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}"
    "table{border-collapse:collapse;margin:12px 0 24px}td{padding:3px 12px 3px 0;vertical-align:top}"
    "td:first-child{color:#666;white-space:nowrap}svg{display:block;margin:8px 0 18px}"
    ".frame{fill:none;stroke:#ccc}.axis{font-size:11px;fill:#666}.title{font-size:13px;font-weight:600}"
    ".legend{font-size:12px}";

// Sets body data-check to "ok N charts" when every drawn curve has a length in the browser's layout.
constexpr const char* kCheck =
    "window.addEventListener('load',()=>{const charts=document.querySelectorAll('svg.chart');"
    "let ok=charts.length>0;for(const c of charts)for(const p of c.querySelectorAll('polyline'))"
    "if(p.points.numberOfItems>1&&!(p.getTotalLength()>0))ok=false;"
    "document.body.dataset.check=(ok?'ok ':'bad ')+charts.length+' charts';});";

}  // namespace

void write_run_report(const std::filesystem::path& output_dir, const std::string& title,
                      const std::vector<ReportFact>& facts) {
  Series loss{"training loss", "#1f77b4", {}, false}, eval{"evaluation loss", "#d62728", {}, true};
  Series lr{"learning rate", "#2ca02c", {}, false}, norm{"gradient norm", "#9467bd", {}, false};
  Series speed{"tokens/s", "#ff7f0e", {}, false};
  std::ifstream in(output_dir / kMetricsFile);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!json_has(r, "step", &nlohmann::json::is_number)) continue;
    const double step = r["step"].get<double>();
    auto add = [&](Series& s, const char* key) {
      if (json_has(r, key, &nlohmann::json::is_number)) s.points.emplace_back(step, r[key].get<double>());
    };
    add(loss, "loss");
    add(eval, "eval_loss");
    add(lr, "lr");
    add(norm, "grad_norm");
    if (json_has(r, "tokens", &nlohmann::json::is_number) &&
        json_has(r, "seconds", &nlohmann::json::is_number) && r["seconds"].get<double>() > 0)
      speed.points.emplace_back(step, r["tokens"].get<double>() / r["seconds"].get<double>());
  }
  std::string html = fmt::format(
      "<!DOCTYPE html><html lang=\"en\"><head><meta "
      "charset=\"utf-8\"><title>{0}</title><style>{1}</style></head>"
      "<body><h1>{0}</h1><table>",
      escape_html(title), kStyle);
  for (const ReportFact& f : facts)
    html += fmt::format("<tr><td>{}</td><td>{}</td></tr>", escape_html(f.label), escape_html(f.value));
  html += "</table>";
  html += chart("loss", {loss, eval});
  html += chart("learning rate", {lr});
  html += chart("gradient norm (before clipping)", {norm});
  html += chart("throughput", {speed});
  html += fmt::format("<script>{}</script></body></html>\n", kCheck);
  write_file_atomic(output_dir / kRunReport, html);
}

}  // namespace ferry
