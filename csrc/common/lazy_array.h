// A fixed-size zero-initialised array in its own anonymous mapping, for buffers sized for the worst
// case (a full batch, every slot, the whole context) that are mostly used in part.
//
// Linux commits a private anonymous page on its first write (reads of untouched pages map the
// shared zero page), so a lane's resident memory follows what it has used, not what it could use:
// the KV cache, activation rows beyond the longest batch seen, logits rows of slots never busy at
// once. MAP_NORESERVE: the size is reserved address space only. Move-only; freed with munmap.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace ls {

template <class T>
class LazyArray {
  static_assert(std::is_trivially_copyable_v<T>, "pages start zeroed, no constructors run");

 public:
  LazyArray() = default;
  // Throws std::bad_alloc when the address space cannot be reserved.
  explicit LazyArray(size_t n) : size_(n) {
    if (n == 0) return;
    void* p = mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
  }
  ~LazyArray() {
    if (data_) munmap(data_, bytes());
  }
  LazyArray(const LazyArray&) = delete;
  LazyArray& operator=(const LazyArray&) = delete;
  LazyArray(LazyArray&& o) noexcept { swap(o); }
  LazyArray& operator=(LazyArray&& o) noexcept {
    swap(o);
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  void swap(LazyArray& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }

  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ls
