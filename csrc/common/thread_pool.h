// A persistent pool of `num_threads` workers (the calling thread counts as one) for fork-join
// loops in the token loop. Decode issues a few hundred parallel_for calls per token, so a call
// must cost ~1 µs when workers are hot: workers spin briefly on a generation counter, then
// yield, then sleep on a condition variable.
//
// Work is split into chunks with boundaries that depend only on (n, grain) — never on the
// thread count — and threads claim chunks dynamically. So (a) results do not depend on how
// many threads run or which thread ran a chunk, and (b) on a loaded machine a descheduled
// worker never stalls the caller: the caller claims the remaining chunks itself and waits
// only for workers that actually joined the call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ls {

class ThreadPool {
 public:
  // num_threads <= 0 → all online cores.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) over [0, n) in chunks aligned to `grain`; returns when all are done.
  // Not re-entrant (fn must not call parallel_for on the same pool).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  static constexpr uint32_t kClosed = 0x80000000u;
  void worker_main();
  void work_chunks();

  int num_threads_;
  std::vector<std::thread> workers_;
  // The current job; written by the caller before joined_ is reset (release) and read by a
  // worker only after it joined (acquire CAS on joined_).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1, n_grains_ = 0, n_chunks_ = 0;
  alignas(64) std::atomic<uint64_t> generation_{0};  // bumped per call; workers watch it
  alignas(64) std::atomic<int64_t> next_chunk_{0};   // chunk claim counter
  alignas(64) std::atomic<uint32_t> joined_{kClosed};  // workers in the current call | kClosed
  alignas(64) std::atomic<uint32_t> finished_{0};    // joined workers that are done
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

int online_cores();

}  // namespace ls
