// BuildId: the identity of an ELF image (NT_GNU_BUILD_ID note contents).
//
// A value type: up to kMaxSize bytes, compared bytewise including the size
// (a 16-byte md5 id is never equal to a 20-byte sha1 id with the same prefix).
// Longer notes are truncated to kMaxSize, as the kernel and perf do, so ids
// from either source compare equal.  An empty BuildId means "none known".
#ifndef MMAP3_READER_BUILD_ID_H_
#define MMAP3_READER_BUILD_ID_H_

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mmap3 {

class BuildId {
 public:
  static constexpr size_t kMaxSize = 20;
  // Hex digits shown in tables ("short build-id").
  static constexpr size_t kShortHexDigits = 12;

  BuildId() = default;
  BuildId(const void* data, size_t size);

  // Parses lower- or upper-case hex with an even number of digits.
  static std::optional<BuildId> FromHex(std::string_view hex);

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  const uint8_t* data() const { return bytes_.data(); }

  std::string Hex() const;
  std::string ShortHex() const;
  size_t Hash() const;

  friend bool operator==(const BuildId& a, const BuildId& b) {
    return a.size_ == b.size_ && a.bytes_ == b.bytes_;
  }
  friend auto operator<=>(const BuildId& a, const BuildId& b) {
    if (auto c = a.size_ <=> b.size_; c != 0) return c;
    return a.bytes_ <=> b.bytes_;
  }

 private:
  std::array<uint8_t, kMaxSize> bytes_{};  // zero beyond size_
  uint8_t size_ = 0;
};

struct BuildIdHash {
  size_t operator()(const BuildId& id) const { return id.Hash(); }
};

}  // namespace mmap3

#endif  // MMAP3_READER_BUILD_ID_H_
