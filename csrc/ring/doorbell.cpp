#include "ring/doorbell.h"

#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "ring/ring.h"

namespace ls::ring {

Doorbell Doorbell::eventfd(int fd) {
  if (fd < 0) throw RingError("eventfd doorbell needs a file descriptor");
  Doorbell d;
  d.kind_ = Kind::EventFd;
  d.fd_ = fd;
  return d;
}

Doorbell Doorbell::semaphore(const std::string& name) {
  sem_t* s = sem_open(name.c_str(), 0);
  if (s == SEM_FAILED) throw RingError("cannot open semaphore " + name + ": " + std::strerror(errno));
  Doorbell d;
  d.kind_ = Kind::Semaphore;
  d.sem_ = s;
  return d;
}

Doorbell Doorbell::from_spec(const std::string& kind, int fd, const std::string& name) {
  if (kind == "eventfd") return eventfd(fd);
  if (kind == "semaphore") return semaphore(name);
  if (kind == "none") return none();
  throw RingError("unknown doorbell kind '" + kind + "' (eventfd, semaphore, none)");
}

Doorbell& Doorbell::operator=(Doorbell&& o) noexcept {
  if (this != &o) {
    if (sem_) sem_close(sem_);
    kind_ = std::exchange(o.kind_, Kind::None);
    fd_ = std::exchange(o.fd_, -1);
    sem_ = std::exchange(o.sem_, nullptr);
  }
  return *this;
}

Doorbell::~Doorbell() {
  if (sem_) sem_close(sem_);
}

void Doorbell::ring() const {
  if (kind_ == Kind::EventFd) {
    const uint64_t one = 1;
    // Non-blocking fd; EAGAIN means the counter is already huge, i.e. the reader will wake.
    ssize_t rc = ::write(fd_, &one, sizeof one);
    (void)rc;
  } else if (kind_ == Kind::Semaphore) {
    sem_post(sem_);
  }
}

bool Doorbell::wait(int64_t timeout_ns) const {
  if (kind_ == Kind::Semaphore) {
    timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    const int64_t ns = deadline.tv_nsec + timeout_ns;
    deadline.tv_sec += ns / 1000000000;
    deadline.tv_nsec = ns % 1000000000;
    return sem_clockwait(sem_, CLOCK_MONOTONIC, &deadline) == 0;
  }
  if (kind_ == Kind::EventFd) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, int(timeout_ns / 1000000)) <= 0) return false;
    uint64_t count;
    return ::read(fd_, &count, sizeof count) == sizeof count;
  }
  timespec ts{timeout_ns / 1000000000, timeout_ns % 1000000000};
  nanosleep(&ts, nullptr);
  return false;
}

}  // namespace ls::ring
