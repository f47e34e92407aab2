// A 64x64->128-bit product with its halves folded (wyhash's "mum"): the
// mixing step of the keyed hashes in keyed_hash.h, location_counts.h and
// stack_counts.cc.
// The high half depends on every bit of both factors, so the folded word's
// low bits (the ones a table indexes by) do too, though not evenly enough
// for a power-of-two table: see LocationCounts::Hash() and
// StackCounts::Hash().  The product is 0 whenever a factor is, and small
// whenever one is small: callers xor each factor with a random word of
// their own, so that no input a capture can choose makes a factor known.
#ifndef MMAP3_READER_MUM_H_
#define MMAP3_READER_MUM_H_

#include <cstdint>

namespace mmap3 {

inline uint64_t Mum(uint64_t a, uint64_t b) {
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

}  // namespace mmap3

#endif  // MMAP3_READER_MUM_H_
