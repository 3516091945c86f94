#include "ring/delta_relay.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ring/json_escape.h"

namespace ls::ring {

using wire::kNumChannels;

void DeltaRelay::add_route(uint64_t request_id, uint32_t num_choices, const std::vector<Framing>& framings,
                           bool collect, bool keep_text) {
  Route& r = routes_[request_id];
  r = Route{};
  r.num_choices = num_choices;
  r.collect = collect;
  r.keep_text = keep_text && !collect;
  r.prefix.assign(size_t(num_choices) * kNumChannels, std::string());
  r.suffix.assign(size_t(num_choices) * kNumChannels, std::string());
  r.middle.assign(size_t(num_choices) * kNumChannels, std::string());
  r.kind.assign(size_t(num_choices) * kNumChannels, kPlain);
  for (const Framing& f : framings) {
    if (f.choice >= num_choices || f.channel >= kNumChannels) continue;
    const size_t k = f.choice * kNumChannels + f.channel;
    r.prefix[k] = f.prefix;
    r.suffix[k] = f.suffix;
    r.middle[k] = f.middle;
    r.kind[k] = f.kind;
    if (f.kind == kNumbered) r.next_number = f.first_number;
  }
  if (collect || keep_text) r.collected.assign(size_t(num_choices) * kNumChannels, std::string());
  if (!collect) r.out.reserve(16 * 1024);
}

bool DeltaRelay::remove_route(uint64_t request_id) { return routes_.erase(request_id) > 0; }

void DeltaRelay::set_socket(uint64_t request_id, int fd) {
  auto it = routes_.find(request_id);
  if (it == routes_.end()) return;
  it->second.fd = fd;
  if (fd < 0) it->second.direct = false;
}

void DeltaRelay::set_direct(uint64_t request_id, bool direct) {
  auto it = routes_.find(request_id);
  if (it == routes_.end()) return;
  it->second.direct = direct && it->second.fd >= 0 && !it->second.collect;
}

std::string DeltaRelay::take_text(uint64_t request_id, uint32_t choice, uint32_t channel) {
  auto it = routes_.find(request_id);
  const size_t k = size_t(choice) * kNumChannels + channel;
  if (it == routes_.end() || channel >= kNumChannels || k >= it->second.collected.size()) return {};
  std::string out;
  out.swap(it->second.collected[k]);
  return out;
}

DeltaRelay::RouteStats DeltaRelay::route_stats(uint64_t request_id) const {
  auto it = routes_.find(request_id);
  if (it == routes_.end()) return {};
  return {it->second.num_direct_deltas, it->second.first_send_ns, it->second.next_number};
}

// One delta into its route: escaped once, then framed for the route's mode.
void DeltaRelay::frame(Route& r, uint64_t request_id, uint32_t choice, uint32_t channel, std::string_view text) {
  if (choice >= r.num_choices) return;
  if (channel >= kNumChannels) channel = 0;
  scratch_.clear();
  wire::json_escape_append(scratch_, text);
  if (r.collect) {
    r.collected[choice * kNumChannels + channel] += scratch_;
    return;
  }
  if (r.keep_text) r.collected[choice * kNumChannels + channel] += scratch_;
  size_t k = choice * kNumChannels + channel;
  if (r.prefix[k].empty() && r.suffix[k].empty() && r.kind[k] == kPlain) k = choice * kNumChannels;  // unframed: content's
  const std::string& prefix = r.prefix[k];
  const std::string& suffix = r.suffix[k];
  const Kind kind = r.kind[k];
  // The event is prefix + first + middle + second + suffix; first/second are the text or the number.
  std::string_view first = scratch_, middle, second;
  if (kind == kTwice) {
    middle = r.middle[k];
    second = scratch_;
  } else if (kind == kNumbered) {
    const int n = std::snprintf(number_, sizeof number_, "%llu", static_cast<unsigned long long>(r.next_number++));
    first = std::string_view(number_, size_t(n));
    middle = r.middle[k];
    second = scratch_;
  }
  const size_t event_bytes = prefix.size() + first.size() + middle.size() + second.size() + suffix.size();
  if (event_bytes == 0) return;  // nothing to say (and a 0-size chunk would end the HTTP body)
  if (r.direct) {
    char head[24];
    const int n = std::snprintf(head, sizeof head, "%zx\r\n", event_bytes);
    r.out.append(head, size_t(n)).append(prefix).append(first).append(middle).append(second).append(suffix);
    r.out.append("\r\n", 2);
    r.num_direct_deltas += 1;
    if (!r.touched) {
      r.touched = true;
      touched_.emplace_back(request_id, &r);
    }
    return;
  }
  if (!queued_.empty() && queued_.back().request_id == request_id && queued_.back().choice == choice) {
    queued_.back().size += event_bytes;  // contiguous with the previous event of this choice
  } else {
    queued_.push_back(Queued{request_id, choice, queued_bytes_.size(), event_bytes});
  }
  queued_bytes_.append(prefix).append(first).append(middle).append(second).append(suffix);
}

void DeltaRelay::send(uint64_t request_id, Route& r) {
  r.touched = false;
  if (r.out.empty()) return;
  ssize_t sent;
  do {
    sent = ::send(r.fd, r.out.data(), r.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  int err = 0;
  if (sent < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) err = errno;
    sent = 0;
  }
  if (sent > 0 && r.first_send_ns == 0) r.first_send_ns = monotonic_ns();
  if (size_t(sent) < r.out.size()) {
    // The socket is full (slow reader) or gone: the gateway writes the tail through its
    // transport first, and later deltas queue behind it until it turns direct on again.
    r.direct = false;
    const size_t unsent = err ? 0 : r.out.size() - size_t(sent);
    partials_.push_back(Partial{request_id, partial_bytes_.size(), unsent, err});
    partial_bytes_.append(r.out, size_t(sent), unsent);
  }
  r.out.clear();
}

DeltaRelay::Result DeltaRelay::pump(Consumer& consumer, int bell_fd, size_t max_records) {
  Result res;
  queued_.clear();
  queued_bytes_.clear();
  partials_.clear();
  partial_bytes_.clear();
  touched_.clear();
  // 1. The doorbell is level-triggered for the event loop: reset it before reading, so a record
  //    published after this point rings again (the producer rings only when armed).
  if (bell_fd >= 0) {
    uint64_t count;
    while (::read(bell_fd, &count, sizeof count) < 0 && errno == EINTR) {
    }
  }
  // 2. Walk.
  size_t visited = 0;
  end_pos_ = consumer.peek(max_records, [&](uint32_t type, const uint8_t* p, size_t n) {
    ++visited;
    if (type != uint32_t(wire::RecordType::Delta) || n < sizeof(wire::DeltaHeader)) {
      res.control_type = type;  // the caller's decoder also reports a malformed delta
      res.control = p;
      res.control_bytes = n;
      return false;
    }
    wire::DeltaHeader h;
    std::memcpy(&h, p, sizeof h);
    auto it = routes_.find(h.request_id);
    if (it == routes_.end()) return true;  // over or cancelled: dropped
    frame(it->second, h.request_id, h.choice, h.channel,
          std::string_view(reinterpret_cast<const char*>(p + sizeof h), n - sizeof h));
    return true;
  });
  res.full = res.control == nullptr && visited == max_records;
  // 3. Send: one non-blocking syscall per touched direct route.
  for (auto& [rid, route] : touched_) send(rid, *route);
  return res;
}

}  // namespace ls::ring
