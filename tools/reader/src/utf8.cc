#include "utf8.h"

#include <fmt/format.h>

namespace mmap3 {

size_t Utf8SequenceAt(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  return n;
}

std::string EscapeNonUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) break;
    i += n;
  }
  if (i == s.size()) return s;
  std::string out;
  for (i = 0; i < s.size();) {
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i]));
      i += 1;
    } else if (s[i] == '\\') {
      out += "\\\\";
      i += 1;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace mmap3
