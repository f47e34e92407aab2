// Consumer side of one perf ring buffer.
//
// Contract: RingBuffer does not own memory.  `base` points at the
// perf_event_mmap_page; the data area of `data_size` bytes (a power of two)
// follows at meta->data_offset, or at `page_size` for kernels older than 4.1
// that leave data_offset zero.  Drain() hands each record to the callback as a
// span that is valid only during the call: it points into the mmap, or into a
// scratch copy when the record straddles the end of the buffer.  Space is
// returned to the kernel (data_tail) only after the callback returns.
//
// Protocol (tools/lib/perf's, and the comment on perf_event_mmap_page):
// load-acquire data_head before reading records, store-release data_tail
// after; this pairs with the kernel's barriers in perf_output_put_handle().
//
// A record with an impossible size (smaller than a header, not 8-byte
// aligned, or larger than the data available) means the stream cannot be
// parsed any further: it is counted in stats().bad_size and everything up to
// the current head is dropped, never fatal.
#ifndef MMAP3_READER_RING_BUFFER_H_
#define MMAP3_READER_RING_BUFFER_H_

#include <linux/perf_event.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace mmap3 {

class RingBuffer {
 public:
  struct Stats {
    uint64_t records = 0;
    uint64_t bytes = 0;
    uint64_t straddled = 0;     // records copied because they wrapped
    uint64_t bad_size = 0;      // impossible sizes seen
    uint64_t dropped_bytes = 0; // bytes skipped after a bad size
  };

  RingBuffer(void* base, size_t page_size, size_t data_size);

  // Reads every record available now; returns how many were delivered.
  // `fn` is called as fn(std::span<const uint8_t>).
  template <typename Fn>
  size_t Drain(Fn&& fn);

  // Bytes the kernel has written that we have not consumed.
  uint64_t Available() const;
  const Stats& stats() const { return stats_; }
  size_t data_size() const { return data_size_; }

 private:
  perf_event_mmap_page* meta_;
  uint8_t* data_;
  size_t data_size_;
  uint64_t mask_;
  std::vector<uint64_t> scratch_;  // 8-byte aligned copy of straddling records
  Stats stats_;
};

template <typename Fn>
size_t RingBuffer::Drain(Fn&& fn) {
  size_t delivered = 0;
  // Loop until head stops moving so one wakeup drains what arrived meanwhile;
  // bounded so a very busy producer cannot keep us here forever.
  for (int pass = 0; pass < 4; ++pass) {
    const uint64_t head = __atomic_load_n(&meta_->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = meta_->data_tail;  // only we write it
    if (head == tail) break;
    while (tail < head) {
      const uint64_t avail = head - tail;
      const size_t off = static_cast<size_t>(tail & mask_);
      perf_event_header h;
      // The 8-byte header itself never straddles: records are 8-byte aligned
      // and the data size is a multiple of 8.
      std::memcpy(&h, data_ + off, sizeof(h));
      if (h.size < sizeof(h) || h.size % 8 != 0 || h.size > avail) {
        ++stats_.bad_size;
        stats_.dropped_bytes += avail;
        tail = head;
        break;
      }
      std::span<const uint8_t> rec;
      if (off + h.size <= data_size_) {
        rec = {data_ + off, h.size};
      } else {
        scratch_.resize((h.size + 7) / 8);
        auto* dst = reinterpret_cast<uint8_t*>(scratch_.data());
        const size_t first = data_size_ - off;
        std::memcpy(dst, data_ + off, first);
        std::memcpy(dst + first, data_, h.size - first);
        rec = {dst, h.size};
        ++stats_.straddled;
      }
      fn(rec);
      ++delivered;
      ++stats_.records;
      stats_.bytes += h.size;
      tail += h.size;
    }
    __atomic_store_n(&meta_->data_tail, tail, __ATOMIC_RELEASE);
  }
  return delivered;
}

}  // namespace mmap3

#endif  // MMAP3_READER_RING_BUFFER_H_
