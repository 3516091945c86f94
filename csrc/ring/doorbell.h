// Wake-up primitives behind a ring: an eventfd (the gateway polls it with loop.add_reader) or a
// named POSIX semaphore (created and unlinked by posix_ipc in Python; opened here by name).
// Ring a doorbell only when Producer::take_bell() says the reader armed it, so counts stay small.
#pragma once

#include <semaphore.h>

#include <cstdint>
#include <string>

namespace ls::ring {

class Doorbell {
 public:
  enum class Kind { None, EventFd, Semaphore };
  Doorbell() = default;
  static Doorbell none() { return Doorbell(); }
  static Doorbell eventfd(int fd);                        // fd stays owned by the caller
  static Doorbell semaphore(const std::string& name);     // throws RingError if it does not exist
  static Doorbell from_spec(const std::string& kind, int fd, const std::string& name);
  Doorbell(Doorbell&& o) noexcept { *this = std::move(o); }
  Doorbell& operator=(Doorbell&& o) noexcept;
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;
  ~Doorbell();

  void ring() const;
  // Blocks up to timeout_ns (CLOCK_MONOTONIC) for one ring; true if rung. EINTR counts as a
  // timeout so a stop flag gets checked. Call without the GIL.
  bool wait(int64_t timeout_ns) const;
  Kind kind() const { return kind_; }

 private:
  Kind kind_ = Kind::None;
  int fd_ = -1;
  sem_t* sem_ = nullptr;
};

}  // namespace ls::ring
