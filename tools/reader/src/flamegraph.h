// --format flamegraph: the report's samples as one self-contained,
// interactive SVG flame graph.  No logic: it draws what
// Profile::BuildReport computed with ProfileOptions::sample_frames.
//
// What the picture holds:
//   frames     one box per (path of frames from the root): the root "all",
//              then the command, then the call chain outermost first; its
//              width is its share of the samples (a frame's children never
//              add up to more than it; the rest is its own samples).
//              Siblings in label order.  Without call chains in the capture
//              the flat profile is drawn: under the root, one frame per leaf
//              location, and the title says so.
//   labels     "symbol [file short-build-id]" ("[file]" without a build-id;
//              "[anon perf-map]" for JIT code named by its perf map), the
//              full label and the counts in each frame's <title>.
//   colours    by build-id: a hue from a hash of it, so a file has the same
//              colour in every picture; versions of one file (same name,
//              other build-ids) are kept at least 25 degrees of hue apart.
//              Frames without a build-id are grey (a pale tint from the
//              path), commands and the root neutral.  A legend lists the
//              files with the most samples.
//   script     inline, written for this file (no external resources): click
//              a frame to zoom to it, "Reset zoom", "Search" highlights the
//              frames whose label matches a regular expression and says
//              what share of the samples they hold, hovering shows a frame's
//              details at the bottom.
// The same model gives the same bytes: nothing depends on time, addresses
// or hash-table order.  Every name is written as printable UTF-8 with XML's
// five characters escaped, so the file is well-formed XML whatever the
// symbols hold.
#ifndef MMAP3_READER_FLAMEGRAPH_H_
#define MMAP3_READER_FLAMEGRAPH_H_

#include <string>

#include "report.h"

namespace mmap3 {

struct FlamegraphOptions {
  std::string title = "mmap3-reader flame graph";
  double width = 1200;  // pixels
  // Frames narrower than this are not drawn (they are counted in the
  // subtitle); their parents keep the width they account for.
  double min_frame_width = 0.1;
};

std::string RenderFlamegraph(const ReportModel& model, const FlamegraphOptions& options = {});

}  // namespace mmap3

#endif  // MMAP3_READER_FLAMEGRAPH_H_
