// Minimal ThreadPool (see thread_pool.h), written on the quant branch so the kernels can be
// tested before the lead's implementation lands; keep exactly one thread_pool.cpp.
#include "common/thread_pool.h"

#include <algorithm>

namespace ls {

int online_cores() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads <= 0 ? online_cores() : num_threads) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_main(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    // Spin briefly (decode issues back-to-back jobs), then sleep.
    for (int spin = 0; g == seen && spin < 20000; ++spin) {
      __builtin_ia32_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (num_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  fn(0);
  while (pending_.load(std::memory_order_acquire) != 0) __builtin_ia32_pause();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int64_t nt = std::min<int64_t>(num_threads_, units);
  if (nt <= 1) {
    fn(0, n);
    return;
  }
  run([&](int t) {
    if (t >= nt) return;
    const int64_t b = std::min(n, units * t / nt * grain);
    const int64_t e = std::min(n, units * (t + 1) / nt * grain);
    if (b < e) fn(b, e);
  });
}

}  // namespace ls
