#include <algorithm>

#include "sampler/sampler.h"

namespace ls {

void StopMatcher::reset(const std::vector<std::string>& stops) {
  stops_.clear();
  index_.clear();
  max_len_ = 0;
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) continue;
    stops_.push_back(stops[i]);
    index_.push_back(int32_t(i));
    max_len_ = std::max(max_len_, stops[i].size());
  }
  held_.clear();
  work_.clear();
  // held_ is always shorter than the longest stop; work_ = held_ + one token's text. Reserving
  // here keeps push() allocation-free for normal token-sized pieces.
  held_.reserve(max_len_ + 16);
  work_.reserve(max_len_ + 1024);
  stopped_ = false;
  matched_ = -1;
}

std::string_view StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  work_.assign(held_);
  work_.append(text);
  held_.clear();
  const std::string_view buf(work_);

  // Earliest-ending occurrence (ties: earliest start). held_ never contains a whole stop, so
  // any occurrence found here ends in the new text.
  size_t best_end = std::string_view::npos, best_start = 0;
  int32_t best = -1;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = buf.find(stops_[i]);
    if (pos == std::string_view::npos) continue;
    const size_t end = pos + stops_[i].size();
    if (end < best_end || (end == best_end && pos < best_start)) {
      best_end = end;
      best_start = pos;
      best = index_[i];
    }
  }
  if (best_end != std::string_view::npos) {
    stopped_ = true;
    matched_ = best;
    return buf.substr(0, best_start);
  }

  // Hold back the longest suffix that is a proper prefix of some stop: it may still become
  // one. Starting the check at the longest possible length lets us stop at the first hit.
  size_t hold = 0;
  const size_t max_hold = std::min(buf.size(), max_len_ ? max_len_ - 1 : 0);
  for (size_t len = max_hold; len > 0 && hold == 0; --len) {
    const std::string_view tail = buf.substr(buf.size() - len);
    for (const std::string& s : stops_)
      if (s.size() > len && std::string_view(s).substr(0, len) == tail) {
        hold = len;
        break;
      }
  }
  held_.assign(buf.substr(buf.size() - hold));
  return buf.substr(0, buf.size() - hold);
}

std::string_view StopMatcher::flush() {
  if (stopped_) return {};
  work_.assign(held_);
  held_.clear();
  return work_;
}

}  // namespace ls
