// A persistent pool of `num_threads` workers (the calling thread counts as worker 0) for
// fork-join parallel loops in the token loop. Dispatch is a generation counter the workers
// spin on (briefly, then sleep on a condition variable), so a parallel_for costs ~1 µs when
// workers are hot — decode issues a few hundred per token.
//
// Results must not depend on num_threads: callers split work into tasks whose individual
// results are computed by one thread each (e.g. contiguous output rows), never reduced
// across threads in a thread-count-dependent order.
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

  // Calls fn(thread_index) once on each of the num_threads threads and returns when all
  // are done. thread_index 0 is the caller. Not re-entrant.
  void run(const std::function<void(int)>& fn);

  // Splits [0, n) into num_threads contiguous chunks (aligned to `grain`) and calls
  // fn(begin, end) for each non-empty chunk.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_main(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  // generation_: bumped (release) by run() to publish job_; workers acquire it.
  // pending_: workers decrement (acq_rel) when done; run() spins until 0 (acquire).
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  alignas(64) std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

int online_cores();

}  // namespace ls
