#include "ring_buffer.h"

namespace mmap3 {

RingBuffer::RingBuffer(void* base, size_t page_size, size_t data_size)
    : meta_(static_cast<perf_event_mmap_page*>(base)),
      data_size_(data_size),
      mask_(data_size - 1) {
  // data_offset/data_size were added in 4.1; before that the data area
  // started right after the control page.
  size_t offset = meta_->data_offset != 0 ? meta_->data_offset : page_size;
  data_ = static_cast<uint8_t*>(base) + offset;
}

uint64_t RingBuffer::Available() const {
  return __atomic_load_n(&meta_->data_head, __ATOMIC_ACQUIRE) - meta_->data_tail;
}

}  // namespace mmap3
