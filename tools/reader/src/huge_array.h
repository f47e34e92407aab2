// A fixed-size, zero-filled array for a large hash table probed at random:
// from its own anonymous mapping, 2 MiB aligned and advised to be backed
// by huge pages (MADV_HUGEPAGE; Debian's default THP mode is "madvise").
//
// Why: a table of tens of MiB probed at random misses the TLB on almost
// every probe with 4 KiB pages, and a prefetch that misses the TLB waits
// for the page walk (measured: most of the location table's time in the
// flat replay).  With 2 MiB pages the whole table needs a few TLB entries.
// Where huge pages are not available the advice is ignored and the array
// works the same, only slower.
#ifndef MMAP3_READER_HUGE_ARRAY_H_
#define MMAP3_READER_HUGE_ARRAY_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

namespace mmap3 {

template <typename T>
class HugeArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  HugeArray() = default;
  // `size` elements, every byte 0.  Throws std::bad_alloc when there is no
  // memory for them.
  explicit HugeArray(size_t size) : size_(size) {
    if (size == 0) return;
    constexpr size_t kPage = 4096, kHuge = size_t{2} << 20;
    const size_t want = size * sizeof(T);
    if (want < kHuge) {
      // Too small for a huge page of its own.
      bytes_ = (want + kPage - 1) / kPage * kPage;
      void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      data_ = static_cast<T*>(p);
      return;
    }
    bytes_ = (want + kHuge - 1) / kHuge * kHuge;
    // One huge page more than needed, to start at a 2 MiB boundary; what
    // lies outside [start, start + bytes_) is given back.
    void* p = mmap(nullptr, bytes_ + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    const auto raw = reinterpret_cast<uintptr_t>(p);
    const uintptr_t start = (raw + kHuge - 1) / kHuge * kHuge;
    if (start > raw) munmap(p, start - raw);
    munmap(reinterpret_cast<void*>(start + bytes_), raw + kHuge - start);
    data_ = reinterpret_cast<T*>(start);
    madvise(data_, bytes_, MADV_HUGEPAGE);
  }
  HugeArray(const HugeArray&) = delete;
  HugeArray& operator=(const HugeArray&) = delete;
  HugeArray(HugeArray&& o) noexcept { swap(o); }
  HugeArray& operator=(HugeArray&& o) noexcept {
    HugeArray(std::move(o)).swap(*this);
    return *this;
  }
  ~HugeArray() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }

  void swap(HugeArray& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(bytes_, o.bytes_);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() const { return data_; }
  T& operator[](size_t i) const { return data_[i]; }
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t bytes_ = 0;  // mapped: whole pages, huge ones from 2 MiB on
};

}  // namespace mmap3

#endif  // MMAP3_READER_HUGE_ARRAY_H_
