#include "build_id.h"

#include <algorithm>
#include <cstring>

#include "keyed_hash.h"

namespace mmap3 {

BuildId::BuildId(const void* data, size_t size) {
  size_ = static_cast<uint8_t>(std::min(size, kMaxSize));
  if (size_ != 0) std::memcpy(bytes_.data(), data, size_);
}

std::optional<BuildId> BuildId::FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0 || hex.size() / 2 > kMaxSize) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::array<uint8_t, kMaxSize> bytes{};
  for (size_t i = 0; i < hex.size() / 2; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return BuildId(bytes.data(), hex.size() / 2);
}

std::string BuildId::Hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size_ * 2);
  for (size_t i = 0; i < size_; ++i) {
    out.push_back(kDigits[bytes_[i] >> 4]);
    out.push_back(kDigits[bytes_[i] & 0xf]);
  }
  return out;
}

std::string BuildId::ShortHex() const { return Hex().substr(0, kShortHexDigits); }

size_t BuildId::Hash() const {
  // Keyed (keyed_hash.h): a capture's build-id table and its MMAP2 records
  // choose the ids, and FNV-1a, which this was, can be aimed at one bucket.
  return KeyedHashBytes(bytes_.data(), size_);
}

}  // namespace mmap3
