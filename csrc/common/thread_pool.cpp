#include "common/thread_pool.h"

#include <immintrin.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace ls {
namespace {
// Idle workers: spin (~tens of µs, the gap between matmuls of one token), then yield the core
// for a while (other processes may need it), then sleep. An idle lane stops burning CPU
// within about a millisecond.
constexpr int kSpinIterations = 20000;
constexpr int kYieldIterations = 200;
// Chunks per call: enough for dynamic balance across 2–8 threads, few enough that claiming
// a chunk (one atomic add) is negligible next to its work.
constexpr int64_t kMaxChunks = 16;
}  // namespace

int online_cores() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : 1;
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads > 0 ? num_threads : online_cores()) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_main(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_seq_cst);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_chunks() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= n_chunks_) return;
    const int64_t g0 = n_grains_ * c / n_chunks_, g1 = n_grains_ * (c + 1) / n_chunks_;
    const int64_t b = g0 * grain_, e = std::min(n_, g1 * grain_);
    if (b < e) (*fn_)(b, e);
  }
}

void ThreadPool::worker_main() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < kSpinIterations; ++i) {
      _mm_pause();
      gen = generation_.load(std::memory_order_acquire);
    }
    for (int i = 0; gen == seen && i < kYieldIterations; ++i) {
      sched_yield();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    // Join whichever call is open (possibly a later one than `gen`: that is fine, the job is
    // read only after the successful CAS). A closed call is skipped.
    uint32_t j = joined_.load(std::memory_order_acquire);
    while (!(j & kClosed)) {
      if (joined_.compare_exchange_weak(j, j + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        work_chunks();
        finished_.fetch_add(1, std::memory_order_release);  // pairs with the caller's acquire wait
        break;
      }
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain_ = std::max<int64_t>(grain, 1);
  n_ = n;
  n_grains_ = (n + grain_ - 1) / grain_;
  n_chunks_ = std::min(n_grains_, kMaxChunks);
  fn_ = &fn;
  next_chunk_.store(0, std::memory_order_relaxed);
  if (num_threads_ == 1 || n_chunks_ == 1) {
    work_chunks();
    return;
  }
  finished_.store(0, std::memory_order_relaxed);
  joined_.store(0, std::memory_order_release);  // opens the call: publishes fn_ and the counters
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);  // a worker between its check and wait must see the bump
    cv_.notify_all();
  }
  work_chunks();
  const uint32_t joined = joined_.fetch_or(kClosed, std::memory_order_acq_rel) & ~kClosed;
  for (int i = 0; finished_.load(std::memory_order_acquire) != joined; ++i) {
    if (i < kSpinIterations) _mm_pause();
    else sched_yield();
  }
}

}  // namespace ls
