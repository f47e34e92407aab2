// The hash of every std::unordered_map whose keys come from what the reader
// reads: pids, tids and sample ids of a capture, addresses, build-ids, names
// from symbol tables and perf maps.
//
// std::hash of an integer is the integer, which libstdc++ takes modulo a
// prime bucket count that follows from the table's size; its string hash is
// MurmurHash2 with a fixed seed, for which collisions that hold for every
// seed are published.  Either way a capture, or a file mapped by a process
// we profile, can put every key in one bucket and make each lookup walk all
// of them: a crafted perf.data of 200,000 samples whose 40,000 tids are
// multiples of 42,043 took 34 s of CPU to report instead of 0.5 s.
//
// KeyedHash mixes each key with two random words drawn once per process
// (Mum(), mum.h), so which keys share a bucket cannot be known from outside.
// A collision costs a probe, never a wrong answer: the tables compare keys
// in full.
#ifndef MMAP3_READER_KEYED_HASH_H_
#define MMAP3_READER_KEYED_HASH_H_

#include <array>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "files.h"
#include "mum.h"

namespace mmap3 {

// Odd: a multiply by it loses no bits.
inline const std::array<uint64_t, 2>& HashKey() {
  static const std::array<uint64_t, 2> key{RandomWord() | 1, RandomWord() | 1};
  return key;
}

// Bytes, a word at a time, each folded into the running value by a keyed
// multiply; the length starts it, so that zero bytes at the end count.
inline uint64_t KeyedHashBytes(const void* data, size_t size) {
  const auto& k = HashKey();
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = Mum(size ^ k[0], k[1]);
  for (; size >= 8; p += 8, size -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = Mum(h ^ w ^ k[0], k[1]);
  }
  if (size > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, size);
    h = Mum(h ^ w ^ k[0], k[1]);
  }
  return h;
}

struct KeyedHash {
  template <std::integral T>
  size_t operator()(T v) const {
    const auto& k = HashKey();
    return Mum(static_cast<uint64_t>(v) ^ k[0], k[1]);
  }
  size_t operator()(const void* p) const { return (*this)(reinterpret_cast<uintptr_t>(p)); }
  template <typename A, typename B>
  size_t operator()(const std::pair<A, B>& v) const {
    const auto& k = HashKey();
    return Mum((*this)(v.first) ^ k[1], (*this)(v.second) ^ k[0]);
  }
  size_t operator()(std::string_view s) const { return KeyedHashBytes(s.data(), s.size()); }
  size_t operator()(const std::string& s) const { return KeyedHashBytes(s.data(), s.size()); }
};

template <typename Key, typename Value>
using KeyedMap = std::unordered_map<Key, Value, KeyedHash>;
template <typename Key>
using KeyedSet = std::unordered_set<Key, KeyedHash>;

}  // namespace mmap3

#endif  // MMAP3_READER_KEYED_HASH_H_
